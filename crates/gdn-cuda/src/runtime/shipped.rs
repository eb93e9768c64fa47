//! Shipped CUBINs: kernel modules compiled when a package is built (`gdn kernels --arch sm_90a --ship DIR`) and
//! installed with it (the Python wheel carries them in `gdn/cubin/`), so that a process on a fresh machine loads
//! its kernels without running NVRTC. Compiling every sm_90a module at first use takes ~38 s on an H200 machine;
//! the disk cache (`nvrtc.rs`) only helps the second process on the same machine.
//!
//! A store is a folder: one file per module (`<key>.gdnbin`, the disk cache's entry format: magic, lengths,
//! SHA-256 of the payload, ptxas log, CUBIN) and a manifest `STORE` written last:
//!
//! ```text
//! gdn-cubin-store-v1
//! built-by NVRTC 13.0
//! <key> <arch> <bytes> <source> [<define> ...]      one line per module
//! ```
//!
//! The key is the SHA-256 of (store format, NVRTC options without the include path — the architecture is one of
//! them —, source name and text, every in-memory header's name and text). Unlike the disk cache's key it leaves out
//! the NVRTC version and the CUDA include folder: both belong to the machine that builds the package, which need
//! not match the one that runs it (the GPU machines have NVRTC 13.0). The manifest records which NVRTC built the
//! store. A changed kernel source, define or architecture misses, and that module is compiled by NVRTC as before.
//!
//! Trust: an entry whose digest does not check out is ignored. One that does is test-loaded into the context that
//! is current on the calling thread (`cuModuleLoadData`, then unloaded) before it is handed out: a CUBIN the
//! driver refuses (a driver older than the NVRTC that built it, another GPU) is passed over and the module is
//! compiled with NVRTC, never an error. Without a current context (the CLI's GPU-free commands) nothing is handed
//! out.
//!
//! Where stores come from, searched in this order: `$GDN_CUBIN_DIR` (read once; `0`, `off` or `none` turns shipped
//! CUBINs off for the process, for measuring compiles), then every folder registered with `use_shipped_kernels`
//! (the Python package registers its own at import). `GDN_KERNEL_DIR` is another thing: a folder of kernel
//! *sources* (`kernels::sources`), whose changed text simply misses here.

use crate::runtime::{entry, loader};
use std::collections::HashSet;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Environment variable naming a store folder, or `0` / `off` / `none` for none.
pub const DIR_ENV: &str = "GDN_CUBIN_DIR";
/// The manifest's file name inside a store.
pub const MANIFEST: &str = "STORE";
const FORMAT: &str = "gdn-cubin-store-v1";
/// The format tag hashed first into every store key (`nvrtc::shipped_key`).
pub(crate) const KEY_FORMAT: &[u8] = FORMAT.as_bytes();
const ENTRY_EXT: &str = "gdnbin";
/// At most this many refusals are kept for `status()`.
const MAX_NOTES: usize = 32;

/// One registered store.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    built_by: String,
    keys: HashSet<String>,
    arches: Vec<String>,
}

impl Store {
    fn describe(&self) -> String {
        format!(
            "{} ({} modules for {}, built by {})",
            self.dir.display(),
            self.keys.len(),
            if self.arches.is_empty() {
                "no architecture".to_string()
            } else {
                self.arches.join(", ")
            },
            self.built_by
        )
    }

    /// The entry for `key` (its file, log and CUBIN) when the manifest lists it and it checks out.
    pub(crate) fn read(&self, key: &str) -> Result<Option<(PathBuf, String, Vec<u8>)>, String> {
        if !self.keys.contains(key) {
            return Ok(None);
        }
        let path = entry_path(&self.dir, key);
        match std::fs::read(&path)
            .ok()
            .and_then(|b| entry::decode_entry(&b))
        {
            Some((log, cubin)) => Ok(Some((path, log, cubin))),
            None => Err(format!("{} is missing or damaged", path.display())),
        }
    }
}

/// A module served by a store.
pub(crate) struct Found {
    pub path: PathBuf,
    pub log: String,
    pub cubin: Vec<u8>,
}

/// What `$GDN_CUBIN_DIR` said, read once.
enum EnvSetting {
    Unset,
    Off,
    Store(Result<Store, String>),
}

static ENV: OnceLock<EnvSetting> = OnceLock::new();
static REGISTERED: Mutex<Vec<Store>> = Mutex::new(Vec::new());
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HITS: AtomicUsize = AtomicUsize::new(0);

fn env_setting() -> &'static EnvSetting {
    ENV.get_or_init(|| match std::env::var_os(DIR_ENV) {
        None => EnvSetting::Unset,
        Some(v) if v.is_empty() => EnvSetting::Unset,
        Some(v) if matches!(v.to_str(), Some("0" | "off" | "none")) => EnvSetting::Off,
        Some(v) => {
            EnvSetting::Store(open_store(Path::new(&v)).map_err(|e| format!("{DIR_ENV}: {e}")))
        }
    })
}

fn note(msg: String) {
    let mut n = NOTES.lock().unwrap_or_else(|e| e.into_inner());
    if n.len() < MAX_NOTES && !n.contains(&msg) {
        n.push(msg);
    }
}

/// Registers the store in `dir` (after `$GDN_CUBIN_DIR`, in call order; a folder registered twice is kept once)
/// and describes it. An error names the folder and what is wrong with it; nothing is registered then. Reads only
/// the manifest: no driver, NVRTC or GPU is touched.
pub fn use_shipped_kernels(dir: &Path) -> Result<String, String> {
    let store = open_store(dir)?;
    let text = store.describe();
    let mut reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if !reg.iter().any(|s| s.dir == store.dir) {
        reg.push(store);
    }
    Ok(text)
}

/// The stores in use, the number of modules served from them so far, and why entries were passed over (for
/// diagnostics and logs).
pub fn status() -> Vec<String> {
    let mut out = Vec::new();
    match env_setting() {
        EnvSetting::Off => out.push(format!("shipped CUBINs off ({DIR_ENV})")),
        EnvSetting::Store(Ok(s)) => out.push(format!("store {}", s.describe())),
        EnvSetting::Store(Err(e)) => out.push(e.clone()),
        EnvSetting::Unset => {}
    }
    for s in REGISTERED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        out.push(format!("store {}", s.describe()));
    }
    out.push(format!(
        "{} modules loaded from shipped CUBINs",
        HITS.load(Ordering::Relaxed)
    ));
    out.extend(
        NOTES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    out
}

pub(crate) fn open_store(dir: &Path) -> Result<Store, String> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("shipped CUBIN store {}: {e}", path.display()))?;
    parse_manifest(dir, &text).map_err(|e| format!("shipped CUBIN store {}: {e}", path.display()))
}

fn parse_manifest(dir: &Path, text: &str) -> Result<Store, String> {
    let mut lines = text.lines();
    if lines.next() != Some(FORMAT) {
        return Err(format!("not a '{FORMAT}' manifest"));
    }
    let built_by = lines
        .next()
        .and_then(|l| l.strip_prefix("built-by "))
        .ok_or("second line is not 'built-by ...'")?
        .to_string();
    let (mut keys, mut arches) = (HashSet::new(), Vec::<String>::new());
    for (i, line) in lines.enumerate() {
        let mut f = line.split_whitespace();
        let (Some(key), Some(arch)) = (f.next(), f.next()) else {
            return Err(format!("line {}: expected '<key> <arch> ...'", i + 3));
        };
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("line {}: '{key}' is not a SHA-256 key", i + 3));
        }
        keys.insert(key.to_string());
        if !arches.iter().any(|a| a == arch) {
            arches.push(arch.to_string());
        }
    }
    Ok(Store {
        dir: dir.to_path_buf(),
        built_by,
        keys,
        arches,
    })
}

fn entry_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.{ENTRY_EXT}"))
}

/// Whether any store is in use (`$GDN_CUBIN_DIR` is not `0` and names a store, or one was registered).
pub(crate) fn in_use() -> bool {
    match env_setting() {
        EnvSetting::Off => false,
        EnvSetting::Store(Ok(_)) => true,
        _ => !REGISTERED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty(),
    }
}

/// The first store entry under `key` (`nvrtc::shipped_key`) that checks out and that the driver loads in the
/// context current on this thread; `None` when no store holds one, shipped CUBINs are off, or no context is
/// current. `what` names the module in the refusals kept for `status()`.
pub(crate) fn find(key: &str, what: &str) -> Option<Found> {
    let env = match env_setting() {
        EnvSetting::Off => return None,
        EnvSetting::Store(Ok(s)) => Some(s),
        _ => None,
    };
    let reg = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    for s in env.into_iter().chain(reg.iter()) {
        let (path, log, cubin) = match s.read(key) {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            Err(e) => {
                note(format!("{what}: {e}"));
                continue;
            }
        };
        if let Err(e) = driver_loads(&cubin) {
            note(format!(
                "{what} from {}: {e}; compiled with NVRTC instead",
                s.dir.display()
            ));
            continue;
        }
        HITS.fetch_add(1, Ordering::Relaxed);
        return Some(Found { path, log, cubin });
    }
    None
}

/// Whether the driver accepts `cubin` in the context current on this thread (loaded, then unloaded).
fn driver_loads(cubin: &[u8]) -> Result<(), String> {
    use cudarc::driver::result;
    loader::driver()?;
    match result::ctx::get_current() {
        Ok(Some(_)) => {}
        Ok(None) => return Err("no CUDA context is current to test-load it".into()),
        Err(e) => return Err(format!("cuCtxGetCurrent: {e:?}")),
    }
    // SAFETY: an ELF image whose digest checked out, loaded into the current context and unloaded at once.
    unsafe {
        let m = result::module::load_data(cubin.as_ptr() as *const c_void)
            .map_err(|e| format!("the driver refuses it (cuModuleLoadData: {e:?})"))?;
        let _ = result::module::unload(m);
    }
    Ok(())
}

/// Writes a store: `create` empties the folder of a previous store, `add` writes one module, `finish` writes the
/// manifest (last, so that a store cut short has none and is never used).
pub struct StoreWriter {
    dir: PathBuf,
    lines: Vec<String>,
    bytes: u64,
}

impl StoreWriter {
    /// Creates `dir` (and its parents) and removes a previous store's files from it (`STORE`, `*.gdnbin`; nothing else).
    pub fn create(dir: &Path) -> Result<StoreWriter, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("--ship {}: {e}", dir.display()))?;
        let rd = std::fs::read_dir(dir).map_err(|e| format!("--ship {}: {e}", dir.display()))?;
        for e in rd.flatten() {
            let p = e.path();
            let ours = p.file_name().is_some_and(|n| n == MANIFEST)
                || p.extension().is_some_and(|x| x == ENTRY_EXT);
            if ours && p.is_file() {
                std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        Ok(StoreWriter {
            dir: dir.to_path_buf(),
            lines: Vec::new(),
            bytes: 0,
        })
    }

    /// Adds one module under `key` (`nvrtc::shipped_key`): its architecture, a description for the manifest (source
    /// and defines), ptxas's log and the CUBIN. A key added twice is kept once.
    pub fn add(
        &mut self,
        key: &str,
        arch: &str,
        what: &str,
        log: &str,
        cubin: &[u8],
    ) -> Result<(), String> {
        if key.len() != 64 || key.contains(char::is_whitespace) {
            return Err(format!("'{key}' is not a store key"));
        }
        if self.lines.iter().any(|l| l.starts_with(key)) {
            return Ok(());
        }
        let path = entry_path(&self.dir, key);
        let bytes = entry::encode_entry(log, cubin);
        std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        self.bytes += bytes.len() as u64;
        self.lines
            .push(format!("{key} {arch} {} {what}", bytes.len()));
        Ok(())
    }

    /// Writes the manifest, naming the compiler that built the entries (`NVRTC 13.0`); returns (modules, bytes).
    pub fn finish(self, built_by: &str) -> Result<(usize, u64), String> {
        let mut text = format!("{FORMAT}\nbuilt-by {built_by}\n");
        for l in &self.lines {
            text.push_str(l);
            text.push('\n');
        }
        let path = self.dir.join(MANIFEST);
        let tmp = self
            .dir
            .join(format!("{MANIFEST}.tmp{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((self.lines.len(), self.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUBIN_A: &[u8] = b"\x7fELF-a";
    const CUBIN_B: &[u8] = b"\x7fELF-b";

    #[test]
    fn store_roundtrip() {
        let dir = std::env::temp_dir().join(format!("gdn-shipped-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (ka, kb, kc) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        let mut w = StoreWriter::create(&dir).unwrap();
        w.add(&ka, "sm_90a", "m.cu", "ptxas info", CUBIN_A).unwrap();
        w.add(&kb, "sm_90a", "m.cu GDN_SERVING=1", "", CUBIN_B)
            .unwrap();
        assert!(w.add("short", "sm_90a", "m.cu", "", CUBIN_A).is_err());
        let (n, bytes) = w.finish("NVRTC 13.0").unwrap();
        assert_eq!(n, 2);
        assert!(bytes > 2 * 56);

        let s = open_store(&dir).unwrap();
        assert_eq!(s.built_by, "NVRTC 13.0");
        assert_eq!(s.arches, vec!["sm_90a".to_string()]);
        let (path, log, cubin) = s.read(&ka).unwrap().expect("written entry found");
        assert_eq!((log.as_str(), cubin.as_slice()), ("ptxas info", CUBIN_A));
        assert_eq!(path, dir.join(format!("{ka}.gdnbin")));
        assert_eq!(s.read(&kb).unwrap().unwrap().2, CUBIN_B);
        assert!(s.read(&kc).unwrap().is_none());

        // A damaged entry is refused, never handed out.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(s.read(&ka).is_err());

        // Writing again replaces the previous store; a store without its manifest is refused.
        let w = StoreWriter::create(&dir).unwrap();
        assert!(open_store(&dir).is_err());
        w.finish("NVRTC 13.0").unwrap();
        let s = open_store(&dir).unwrap();
        assert!(s.keys.is_empty());
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unverified_entries_are_not_handed_out() {
        // No CUDA context is current on a test thread (and there may be no driver): an entry that checks out is still
        // passed over, with the reason kept, and the caller compiles.
        let dir = std::env::temp_dir().join(format!("gdn-shipped-verify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = "d".repeat(64);
        let mut w = StoreWriter::create(&dir).unwrap();
        w.add(&key, "sm_90a", "v.cu", "", CUBIN_A).unwrap();
        w.finish("NVRTC 13.0").unwrap();
        assert!(use_shipped_kernels(&dir)
            .unwrap()
            .contains("1 modules for sm_90a"));
        assert!(use_shipped_kernels(&dir.join("missing")).is_err());
        assert!(find(&key, "v.cu (sm_90a)").is_none());
        if !matches!(env_setting(), EnvSetting::Off) {
            assert!(in_use());
            assert!(
                status().iter().any(|l| l.starts_with("v.cu (sm_90a) from")),
                "{:?}",
                status()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn manifest_errors_name_the_line() {
        let d = Path::new("/nonexistent");
        assert!(parse_manifest(d, "something else\n").is_err());
        assert!(parse_manifest(d, &format!("{FORMAT}\n")).is_err());
        let e =
            parse_manifest(d, &format!("{FORMAT}\nbuilt-by NVRTC 13.0\nabc sm_90a\n")).unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        let ok = parse_manifest(
            d,
            &format!(
                "{FORMAT}\nbuilt-by NVRTC 13.0\n{} sm_90a 10 m.cu\n",
                "0".repeat(64)
            ),
        )
        .unwrap();
        assert_eq!(ok.keys.len(), 1);
        assert!(open_store(d).unwrap_err().contains("/nonexistent/STORE"));
    }
}
