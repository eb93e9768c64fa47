//! NVRTC: compile a kernel source to a CUBIN for one architecture (or to PTX for a `compute_` target, which the driver
//! compiles when it loads it), with a disk cache.
//!
//! NVRTC is called through the library handle that `loader.rs` opened (a small function table), never by
//! soname. Every compile asks ptxas for its resource report (`--ptxas-options=-v`); the log is cached with
//! the CUBIN so that `gdn kernels` can print registers / shared memory / spills on a cache hit too.
//!
//! Cache: one file per compile in `$GDN_CACHE_DIR`, else `$XDG_CACHE_HOME/gdn`, else `~/.cache/gdn`
//! (subfolder `nvrtc/`), named by the SHA-256 of (format version, NVRTC version, options — the architecture is
//! one of them —, source name and text, every header's name and text). An entry holds a magic, the lengths,
//! a SHA-256 of its payload, the log and the CUBIN; anything that does not check out (truncated, flipped
//! bits, neither an ELF nor NUL-terminated PTX) is ignored and recompiled, then rewritten (write to a temporary file, then rename).
//! A cache folder that cannot be written only costs the next run a compile.
//!
//! Before either, `compile` asks the shipped CUBINs (`shipped.rs`: compiled when the package was built, keyed
//! without the NVRTC version, test-loaded by the driver), so that a fresh machine runs NVRTC only for what the
//! package did not ship.

pub use crate::runtime::entry::{decode_entry, encode_entry};
use crate::runtime::{loader, shipped};
use sha2::{Digest, Sha256};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

type Program = *mut c_void;
type Res = c_int;
const NVRTC_SUCCESS: Res = 0;

/// The NVRTC entry points gdn uses.
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Res,
    error_string: unsafe extern "C" fn(Res) -> *const c_char,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Res,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Res,
    destroy: unsafe extern "C" fn(*mut Program) -> Res,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Res,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Res,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Res,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Res,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Res,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Res,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn api() -> Result<&'static Api, String> {
    API.get_or_init(|| {
        let l = loader::nvrtc()?;
        // SAFETY: symbol types are the documented NVRTC C signatures.
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    *l.lib
                        .get($name)
                        .map_err(|e| format!("NVRTC at {}: {e}", l.path))?
                };
            }
            Ok(Api {
                version: sym!(b"nvrtcVersion\0"),
                error_string: sym!(b"nvrtcGetErrorString\0"),
                create: sym!(b"nvrtcCreateProgram\0"),
                compile: sym!(b"nvrtcCompileProgram\0"),
                destroy: sym!(b"nvrtcDestroyProgram\0"),
                cubin_size: sym!(b"nvrtcGetCUBINSize\0"),
                cubin: sym!(b"nvrtcGetCUBIN\0"),
                ptx_size: sym!(b"nvrtcGetPTXSize\0"),
                ptx: sym!(b"nvrtcGetPTX\0"),
                log_size: sym!(b"nvrtcGetProgramLogSize\0"),
                log: sym!(b"nvrtcGetProgramLog\0"),
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// NVRTC's version, e.g. (13, 0).
pub fn version() -> Result<(i32, i32), String> {
    let a = api()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to live integers.
    check(
        a,
        unsafe { (a.version)(&mut major, &mut minor) },
        "nvrtcVersion",
    )?;
    Ok((major, minor))
}

/// Where NVRTC was loaded from, and the CUDA include folder it compiles against.
pub fn describe() -> Result<String, String> {
    let l = loader::nvrtc()?;
    let (ma, mi) = version()?;
    Ok(format!(
        "NVRTC {ma}.{mi} from {}; CUDA headers from {}",
        l.path,
        l.include_dir
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(not found)".into())
    ))
}

fn check(a: &Api, r: Res, what: &str) -> Result<(), String> {
    if r == NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: NVRTC returns a static C string for every result code.
    let msg = unsafe { std::ffi::CStr::from_ptr((a.error_string)(r)) };
    Err(format!("{what}: {} ({r})", msg.to_string_lossy()))
}

/// One compilation unit.
pub struct Request<'a> {
    /// File name shown in diagnostics (`recurrent.cu`).
    pub name: &'a str,
    pub source: &'a str,
    /// In-memory headers the source may `#include "..."` (name, text).
    pub headers: &'a [(&'a str, &'a str)],
    /// e.g. `sm_90a` (a CUBIN), or `compute_80` (PTX, NUL-terminated, which the driver compiles when it loads it).
    pub arch: &'a str,
    /// Extra options (`-DGDN_DEVICE_PLAN=1`).
    pub defines: &'a [&'a str],
}

/// A compiled CUBIN and the compiler's log (with the ptxas resource report).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The CUBIN, or for a `compute_` request the PTX text with its NUL.
    pub cubin: Vec<u8>,
    pub log: String,
    /// Not compiled by this process: from the disk cache or a shipped store.
    pub from_cache: bool,
    /// From a shipped store (`shipped.rs`; `cache_file` is its entry).
    pub shipped: bool,
    pub seconds: f64,
    pub cache_file: Option<PathBuf>,
}

/// The full NVRTC option list of a request (also part of the cache key).
pub fn options(req: &Request, include_dir: Option<&Path>) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={}", req.arch),
        "-std=c++17".to_string(),
        "-lineinfo".to_string(),
        "--ptxas-options=-v".to_string(),
    ];
    if let Some(d) = include_dir {
        o.push(format!("--include-path={}", d.display()));
    }
    o.extend(req.defines.iter().map(|d| format!("-D{d}")));
    o
}

/// One request's CUBIN: from a shipped store when one holds it and the driver loads it in the context current on
/// this thread, else from the disk cache, else compiled.
pub fn compile(req: &Request) -> Result<Compiled, String> {
    if shipped::in_use() {
        let start = Instant::now();
        let what = format!("{} ({})", req.name, req.arch);
        if let Some(f) = shipped::find(&shipped_key(req), &what) {
            return Ok(Compiled {
                cubin: f.cubin,
                log: f.log,
                from_cache: true,
                shipped: true,
                seconds: start.elapsed().as_secs_f64(),
                cache_file: Some(f.path),
            });
        }
    }
    compile_cached(req, false)
}

/// The key of `req` in a shipped store: the disk cache's fields without the NVRTC version and the include folder,
/// which belong to the machine that built the store (see `shipped.rs`).
pub fn shipped_key(req: &Request) -> String {
    request_key(shipped::KEY_FORMAT, None, req, &options(req, None))
}

/// Whether a compile log holds ptxas's resource report (`--ptxas-options=-v`).
pub fn has_ptxas_report(log: &str) -> bool {
    log.contains("ptxas info")
}

/// `compile` for a caller that needs ptxas's resource report or NVRTC's own CUBIN (`gdn kernels`, which writes the
/// shipped stores): shipped CUBINs are not consulted, and a cache entry without a report is
/// compiled again. NVRTC 13 serves a compile it has seen before (any process, same user) from the CUDA
/// compute cache (`~/.nv/ComputeCache`) in ~0.1 s and without running ptxas, so its log has no report and
/// the entry written then has none either (seen on an H200 machine). The caller must also keep NVRTC from
/// that cache: `CUDA_CACHE_DISABLE=1` in the environment before NVRTC is loaded.
pub fn compile_with_report(req: &Request) -> Result<Compiled, String> {
    compile_cached(req, true)
}

fn compile_cached(req: &Request, need_report: bool) -> Result<Compiled, String> {
    let lib = loader::nvrtc()?;
    let include = lib.include_dir.as_deref();
    if include.is_none() {
        return Err(format!(
            "CUDA headers (cuda_bf16.h) not found; looked in: {}. Set GDN_CUDA_INCLUDE, or install \
             nvidia-cuda-runtime==13.0.96 and nvidia-cuda-crt==13.0.88",
            lib.include_search.join("; ")
        ));
    }
    let opts = options(req, include);
    let ver = version()?;
    let key = cache_key(req, &opts, ver);
    let file = cache_dir().map(|d| d.join(format!("{key}.gdnbin")));
    let start = Instant::now();
    if let Some(f) = &file {
        if let Some((log, cubin)) =
            read_entry(f).filter(|(log, _)| !need_report || has_ptxas_report(log))
        {
            return Ok(Compiled {
                cubin,
                log,
                from_cache: true,
                shipped: false,
                seconds: start.elapsed().as_secs_f64(),
                cache_file: file,
            });
        }
    }
    let (log, cubin) = run_nvrtc(req, &opts)?;
    if let Some(f) = &file {
        write_entry(f, &log, &cubin);
    }
    Ok(Compiled {
        cubin,
        log,
        from_cache: false,
        shipped: false,
        seconds: start.elapsed().as_secs_f64(),
        cache_file: file,
    })
}

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("NUL byte in '{}'", s.escape_debug()))
}

fn run_nvrtc(req: &Request, opts: &[String]) -> Result<(String, Vec<u8>), String> {
    let a = api()?;
    let src = cstr(req.source)?;
    let name = cstr(req.name)?;
    let hdr_text: Vec<CString> = req
        .headers
        .iter()
        .map(|h| cstr(h.1))
        .collect::<Result<_, _>>()?;
    let hdr_name: Vec<CString> = req
        .headers
        .iter()
        .map(|h| cstr(h.0))
        .collect::<Result<_, _>>()?;
    let hdr_text_p: Vec<*const c_char> = hdr_text.iter().map(|c| c.as_ptr()).collect();
    let hdr_name_p: Vec<*const c_char> = hdr_name.iter().map(|c| c.as_ptr()).collect();
    let opt_c: Vec<CString> = opts.iter().map(|o| cstr(o)).collect::<Result<_, _>>()?;
    let opt_p: Vec<*const c_char> = opt_c.iter().map(|c| c.as_ptr()).collect();
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: all strings outlive the calls; arrays have the lengths passed.
    unsafe {
        check(
            a,
            (a.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                hdr_text_p.len() as c_int,
                hdr_text_p.as_ptr(),
                hdr_name_p.as_ptr(),
            ),
            "nvrtcCreateProgram",
        )?;
        let rc = (a.compile)(prog, opt_p.len() as c_int, opt_p.as_ptr());
        let mut n = 0usize;
        let log = if (a.log_size)(prog, &mut n) == NVRTC_SUCCESS && n > 1 {
            let mut buf = vec![0u8; n];
            (a.log)(prog, buf.as_mut_ptr().cast());
            String::from_utf8_lossy(&buf[..n - 1]).into_owned()
        } else {
            String::new()
        };
        let result = if rc != NVRTC_SUCCESS {
            let head = check(a, rc, "nvrtcCompileProgram").unwrap_err();
            Err(format!("{} failed to compile: {head}\n{log}", req.name))
        } else if req.arch.starts_with("compute_") {
            let mut size = 0usize;
            check(a, (a.ptx_size)(prog, &mut size), "nvrtcGetPTXSize")?;
            let mut ptx = vec![0u8; size]; // (the size counts the terminating NUL)
            check(a, (a.ptx)(prog, ptx.as_mut_ptr().cast()), "nvrtcGetPTX")?;
            Ok((log, ptx))
        } else {
            let mut size = 0usize;
            check(a, (a.cubin_size)(prog, &mut size), "nvrtcGetCUBINSize")?;
            if size == 0 {
                Err(format!(
                    "{}: NVRTC produced no CUBIN (is '{}' a real sm_ architecture?)",
                    req.name, req.arch
                ))
            } else {
                let mut cubin = vec![0u8; size];
                check(
                    a,
                    (a.cubin)(prog, cubin.as_mut_ptr().cast()),
                    "nvrtcGetCUBIN",
                )?;
                Ok((log, cubin))
            }
        };
        (a.destroy)(&mut prog);
        result
    }
}

// ------------------------------------------------------------------------------------------ disk cache

const CACHE_FORMAT: &[u8] = b"gdn-nvrtc-cache-v1";

/// The cache folder (`$GDN_CACHE_DIR`, `$XDG_CACHE_HOME/gdn`, `~/.cache/gdn`) + `nvrtc/`.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    let root = var("GDN_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("gdn")))
        .or_else(|| var("HOME").map(|p| p.join(".cache/gdn")))?;
    Some(root.join("nvrtc"))
}

fn cache_key(req: &Request, opts: &[String], ver: (i32, i32)) -> String {
    request_key(CACHE_FORMAT, Some(ver), req, opts)
}

/// SHA-256 (hex) of a format tag, the NVRTC version when given, the options, the source's name and text and every
/// header's name and text (sorted), each field length-prefixed: the disk cache's key (with the version) and the
/// shipped stores' (without).
fn request_key(format: &[u8], nvrtc: Option<(i32, i32)>, req: &Request, opts: &[String]) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(format);
    if let Some(ver) = nvrtc {
        field(format!("nvrtc {}.{}", ver.0, ver.1).as_bytes());
    }
    for o in opts {
        field(o.as_bytes());
    }
    field(req.name.as_bytes());
    field(req.source.as_bytes());
    let mut headers: Vec<_> = req.headers.to_vec();
    headers.sort();
    for (n, t) in headers {
        field(n.as_bytes());
        field(t.as_bytes());
    }
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read_entry(path: &Path) -> Option<(String, Vec<u8>)> {
    decode_entry(&std::fs::read(path).ok()?)
}

fn write_entry(path: &Path, log: &str, cubin: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, encode_entry(log, cubin)).is_ok() && std::fs::rename(&tmp, path).is_ok()
    {
        return;
    }
    let _ = std::fs::remove_file(&tmp);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_everything() {
        let base = Request {
            name: "a.cu",
            source: "x",
            headers: &[("g.cuh", "y")],
            arch: "sm_90a",
            defines: &[],
        };
        let k = |r: &Request| cache_key(r, &options(r, None), (13, 0));
        let k0 = k(&base);
        assert_ne!(
            k0,
            k(&Request {
                source: "x ",
                ..base
            })
        );
        assert_ne!(
            k0,
            k(&Request {
                arch: "sm_90",
                ..base
            })
        );
        assert_ne!(
            k0,
            k(&Request {
                headers: &[("g.cuh", "z")],
                ..base
            })
        );
        assert_ne!(
            k0,
            k(&Request {
                defines: &["N=1"],
                ..base
            })
        );
        assert_ne!(k0, cache_key(&base, &options(&base, None), (13, 1)));
        assert_eq!(k0, k(&base));
    }

    #[test]
    fn shipped_key_leaves_out_the_machine() {
        let a = Request {
            name: "a.cu",
            source: "x",
            headers: &[("g.cuh", "y")],
            arch: "sm_90a",
            defines: &["GDN_SERVING=1"],
        };
        assert_eq!(shipped_key(&a), shipped_key(&Request { ..a }));
        for other in [
            Request { source: "x ", ..a },
            Request { arch: "sm_90", ..a },
            Request {
                headers: &[("g.cuh", "z")],
                ..a
            },
            Request { defines: &[], ..a },
        ] {
            assert_ne!(shipped_key(&a), shipped_key(&other));
        }
        // The include folder and the NVRTC version (the disk cache's) do not enter it.
        let with_include = options(&a, Some(Path::new("/usr/local/cuda/include")));
        assert_ne!(
            shipped_key(&a),
            request_key(shipped::KEY_FORMAT, None, &a, &with_include)
        );
        assert_ne!(shipped_key(&a), cache_key(&a, &options(&a, None), (13, 0)));
    }

    #[test]
    fn shipped_store_roundtrip_by_request() {
        let dir = std::env::temp_dir().join(format!("gdn-ship-roundtrip-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Request {
            name: "recurrent.cu",
            source: "__global__ void k() {}",
            headers: &[("common/g.cuh", "int g;")],
            arch: "sm_90a",
            defines: &[],
        };
        let mut w = shipped::StoreWriter::create(&dir).unwrap();
        let cubin = b"\x7fELF-module".to_vec();
        w.add(&shipped_key(&a), a.arch, a.name, "ptxas info", &cubin)
            .unwrap();
        w.finish("NVRTC 13.0").unwrap();
        let store = shipped::open_store(&dir).unwrap();
        let (_, log, got) = store
            .read(&shipped_key(&a))
            .unwrap()
            .expect("written entry found");
        assert_eq!((log.as_str(), got), ("ptxas info", cubin));
        let changed = Request {
            source: "__global__ void k() { }",
            ..a
        };
        assert!(store.read(&shipped_key(&changed)).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
