//! Finding the CUDA libraries and headers at run time (the binary links none of them).
//!
//! * Driver (`libcuda.so.1`): only through the dynamic loader's path (that is where NVIDIA drivers put it);
//!   cudarc's own lookup (`driver::sys::is_culib_present`) is asked first so that its later lookups, which
//!   panic on failure, can never fail.
//! * NVRTC (`libnvrtc.so.13`), searched in this order, first hit wins:
//!   1. `GDN_NVRTC_LIB` (a file, or a folder holding it) — when set, nothing else is tried;
//!   2. `CUDA_HOME`, then `CUDA_PATH` (`lib64/`, `lib/`, `targets/x86_64-linux/lib/`);
//!   3. the dynamic loader's path (`dlopen("libnvrtc.so.13")`: LD_LIBRARY_PATH, ld.so.cache);
//!   4. the PyPI wheel layout `site-packages/nvidia/cu13/lib/` — site-packages folders are first guessed from
//!      the environment (VIRTUAL_ENV, CONDA_PREFIX, ~/.local, /usr/local, /usr), and only when none holds the
//!      wheel from `python3 -c 'import sys; print(sys.path)'`;
//!   5. `/usr/local/cuda/lib64/`.
//!
//!   A library found by path is opened with RTLD_GLOBAL, and `libnvrtc-builtins.so.13.*` from the same folder
//!   first, so that NVRTC's own `dlopen` of its builtins (by soname) finds it already loaded. gdn calls NVRTC
//!   only through the handle opened here (see `nvrtc.rs`), never through cudarc's soname lookup, so a stray
//!   unversioned `libnvrtc.so` elsewhere can never be picked up instead.
//! * CUDA headers (the folder holding `cuda_bf16.h`): `GDN_CUDA_INCLUDE`, then `../include` beside the NVRTC
//!   library that was loaded (right for both the toolkit and the wheels), `CUDA_HOME`/`CUDA_PATH` `include/`,
//!   the wheels' `nvidia/cu13/include`, `/usr/local/cuda/include`.
//!
//! Every failure message lists each place that was tried and what happened there.

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The NVRTC major version gdn is built for (CUDA 13; the GPU machines' driver is 13.0).
pub const NVRTC_SONAME: &str = "libnvrtc.so.13";
const NVRTC_BUILTINS_PREFIX: &str = "libnvrtc-builtins.so.13";
/// The wheel layout of CUDA 13 PyPI packages under a site-packages folder.
const WHEEL_ROOT: &str = "nvidia/cu13";
/// A header every gdn kernel includes; its folder is the include path handed to NVRTC.
const PROBE_HEADER: &str = "cuda_bf16.h";
const DEFAULT_TOOLKIT: &str = "/usr/local/cuda";

/// NVRTC, opened once per process.
pub struct NvrtcLibrary {
    /// Kept open for the life of the process (function pointers point into it).
    pub lib: Library,
    /// Where it was loaded from (an absolute path when known).
    pub path: String,
    /// The folder with the CUDA headers, when found.
    pub include_dir: Option<PathBuf>,
    /// Where the headers were looked for (for error messages).
    pub include_search: Vec<String>,
}

static NVRTC: OnceLock<Result<NvrtcLibrary, String>> = OnceLock::new();

/// Opens NVRTC (once) or says where it looked.
pub fn nvrtc() -> Result<&'static NvrtcLibrary, String> {
    NVRTC.get_or_init(open_nvrtc).as_ref().map_err(Clone::clone)
}

/// Checks that the CUDA driver library can be loaded (before anything calls into cudarc's driver layer).
pub fn driver() -> Result<(), String> {
    // SAFETY: dlopen of the driver library by cudarc's candidate names; nothing is called.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "the NVIDIA driver library (libcuda.so.1) is not in the dynamic loader's path: \
             no NVIDIA driver is installed on this machine (the CPU backend still works)"
                .into(),
        )
    }
}

fn open_nvrtc() -> Result<NvrtcLibrary, String> {
    let mut tried: Vec<String> = Vec::new();
    let lib = find_nvrtc(&mut tried).ok_or_else(|| {
        format!(
            "NVRTC ({NVRTC_SONAME}) not found; looked in: {}. Install it with \
             `python3 -m pip install nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 \
             nvidia-cuda-crt==13.0.88`, or set GDN_NVRTC_LIB to the library's path",
            tried.join("; ")
        )
    })?;
    let (lib, path) = lib;
    let (include_dir, include_search) = find_include(Path::new(&path));
    Ok(NvrtcLibrary {
        lib,
        path,
        include_dir,
        include_search,
    })
}

/// The CUPTI major version gdn is built for (bench's `cupti` tier only; see `cupti.rs`).
pub const CUPTI_SONAME: &str = "libcupti.so.13";

static CUPTI: OnceLock<Result<String, String>> = OnceLock::new();

/// Loads CUPTI (once, RTLD_GLOBAL, kept for the process) so that cudarc's later lookup by soname finds this
/// copy; returns where it came from, or every place tried. Order: `GDN_CUPTI_LIB` (a file or folder; alone
/// when set), `CUDA_HOME` / `CUDA_PATH` (`extras/CUPTI/lib64` and the lib folders), the dynamic loader's path,
/// the PyPI wheels' `nvidia/cu13/lib`, `/usr/local/cuda`.
pub fn cupti() -> Result<String, String> {
    CUPTI.get_or_init(open_cupti).clone()
}

fn open_cupti() -> Result<String, String> {
    let mut tried: Vec<String> = Vec::new();
    let path = find_cupti(&mut tried).ok_or_else(|| {
        format!(
            "CUPTI ({CUPTI_SONAME}) not found; looked in: {}",
            tried.join("; ")
        )
    })?;
    // SAFETY: dlopen by cudarc's candidate names; the copy loaded above matches by soname.
    if unsafe { cudarc::cupti::sys::is_culib_present() } {
        Ok(path)
    } else {
        Err(format!(
            "loaded {path}, but cudarc's lookup of CUPTI by name still fails"
        ))
    }
}

/// Opens `file` (leaked on purpose: cudarc's handle refers to the same object), recording a failed attempt.
fn try_cupti(file: PathBuf, what: &str, tried: &mut Vec<String>) -> Option<String> {
    if !file.is_file() {
        tried.push(format!("{what} {} (absent)", file.display()));
        return None;
    }
    match open_global(&file) {
        Ok(lib) => {
            std::mem::forget(lib);
            Some(file.display().to_string())
        }
        Err(e) => {
            tried.push(format!("{what} {} ({e})", file.display()));
            None
        }
    }
}

/// The folders of a toolkit root that may hold CUPTI.
fn cupti_dirs(root: &Path) -> Vec<PathBuf> {
    let mut d = vec![root.join("extras/CUPTI/lib64")];
    d.extend(toolkit_lib_dirs(root));
    d
}

fn find_cupti(tried: &mut Vec<String>) -> Option<String> {
    if let Some(p) = env_dir("GDN_CUPTI_LIB") {
        let file = if p.is_dir() { p.join(CUPTI_SONAME) } else { p };
        return try_cupti(file, "GDN_CUPTI_LIB", tried);
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env_dir(var) {
            for dir in cupti_dirs(&root) {
                if let Some(hit) = try_cupti(dir.join(CUPTI_SONAME), var, tried) {
                    return Some(hit);
                }
            }
        }
    }
    match open_global(Path::new(CUPTI_SONAME)) {
        Ok(lib) => {
            std::mem::forget(lib);
            return Some(loaded_path(CUPTI_SONAME).unwrap_or_else(|| CUPTI_SONAME.to_string()));
        }
        Err(e) => tried.push(format!("the dynamic loader's path ({e})")),
    }
    for s in wheel_sites("lib") {
        let dir = s.join(WHEEL_ROOT).join("lib");
        if dir.is_dir() {
            if let Some(hit) = try_cupti(dir.join(CUPTI_SONAME), "wheel", tried) {
                return Some(hit);
            }
        }
    }
    cupti_dirs(Path::new(DEFAULT_TOOLKIT))
        .into_iter()
        .find_map(|dir| try_cupti(dir.join(CUPTI_SONAME), "default toolkit", tried))
}

/// dlopen with RTLD_NOW | RTLD_GLOBAL.
fn open_global(name: &Path) -> Result<Library, String> {
    // SAFETY: loading NVIDIA's NVRTC / builtins libraries; their initialisers have no preconditions.
    unsafe { Library::open(Some(name), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())
}

/// Opens NVRTC from a folder (after its builtins), recording the attempt.
fn try_dir(dir: &Path, what: &str, tried: &mut Vec<String>) -> Option<(Library, String)> {
    let file = dir.join(NVRTC_SONAME);
    if !file.is_file() {
        tried.push(format!("{what} {} (absent)", file.display()));
        return None;
    }
    preload_builtins(dir);
    match open_global(&file) {
        Ok(lib) => Some((lib, file.display().to_string())),
        Err(e) => {
            tried.push(format!("{what} {} ({e})", file.display()));
            None
        }
    }
}

/// NVRTC dlopens `libnvrtc-builtins.so.13.x` by name at its first compile; load it from the same folder.
fn preload_builtins(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with(NVRTC_BUILTINS_PREFIX) && !name.contains(".alt.") {
            // Leaked on purpose: it must stay loaded as long as NVRTC is.
            if let Ok(lib) = open_global(&e.path()) {
                std::mem::forget(lib);
            }
        }
    }
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn toolkit_lib_dirs(root: &Path) -> [PathBuf; 3] {
    [
        root.join("lib64"),
        root.join("lib"),
        root.join("targets/x86_64-linux/lib"),
    ]
}

fn find_nvrtc(tried: &mut Vec<String>) -> Option<(Library, String)> {
    // 1. explicit override: a file or a folder; nothing else is tried when it is set
    if let Some(p) = env_dir("GDN_NVRTC_LIB") {
        if p.is_dir() {
            return try_dir(&p, "GDN_NVRTC_LIB", tried);
        }
        if let Some(dir) = p.parent() {
            preload_builtins(dir);
        }
        return match open_global(&p) {
            Ok(lib) => Some((lib, p.display().to_string())),
            Err(e) => {
                tried.push(format!("GDN_NVRTC_LIB={} ({e})", p.display()));
                None
            }
        };
    }
    tried.push("GDN_NVRTC_LIB (unset)".into());
    // 2. toolkit roots from the environment
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        match env_dir(var) {
            Some(root) => {
                for dir in toolkit_lib_dirs(&root) {
                    if let Some(hit) = try_dir(&dir, var, tried) {
                        return Some(hit);
                    }
                }
            }
            None => tried.push(format!("{var} (unset)")),
        }
    }
    // 3. the dynamic loader's path, by soname
    match open_global(Path::new(NVRTC_SONAME)) {
        Ok(lib) => {
            let path = loaded_path(NVRTC_SONAME).unwrap_or_else(|| NVRTC_SONAME.to_string());
            return Some((lib, path));
        }
        Err(e) => tried.push(format!("the dynamic loader's path ({e})")),
    }
    // 4. PyPI wheels
    let sites = wheel_sites("lib");
    let mut wheel_dirs = 0;
    for s in &sites {
        let dir = s.join(WHEEL_ROOT).join("lib");
        if dir.is_dir() {
            wheel_dirs += 1;
            if let Some(hit) = try_dir(&dir, "wheel", tried) {
                return Some(hit);
            }
        }
    }
    if wheel_dirs == 0 {
        tried.push(format!(
            "python site-packages ({} folders, none with {WHEEL_ROOT}/lib)",
            sites.len()
        ));
    }
    // 5. the default toolkit location
    for dir in toolkit_lib_dirs(Path::new(DEFAULT_TOOLKIT)) {
        if let Some(hit) = try_dir(&dir, "default toolkit", tried) {
            return Some(hit);
        }
    }
    None
}

/// The absolute path of an already loaded library, from /proc/self/maps (Linux).
fn loaded_path(soname: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with(&format!("/{soname}")))
        .map(str::to_string)
}

/// Site-packages folders to search for the wheels' `nvidia/cu13/<sub>`: the guessed ones, plus the `sys.path`
/// of `python3` when no guessed folder has that very subfolder (a user site holding only another CUDA wheel,
/// e.g. `nvidia/cu13/bin` from cuobjdump, must not hide the interpreter's NVRTC).
fn wheel_sites(sub: &str) -> Vec<PathBuf> {
    let mut sites = guess_site_dirs();
    if !sites.iter().any(|s| s.join(WHEEL_ROOT).join(sub).is_dir()) {
        for s in python_sys_path() {
            if !sites.contains(&s) {
                sites.push(s);
            }
        }
    }
    sites
}

/// Site-packages folders that can be guessed without running Python.
fn guess_site_dirs() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = env_dir(var) {
            prefixes.push(p);
        }
    }
    if let Some(home) = env_dir("HOME") {
        prefixes.push(home.join(".local"));
    }
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    let mut out = Vec::new();
    for prefix in prefixes {
        let lib = prefix.join("lib");
        let Ok(entries) = std::fs::read_dir(&lib) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("python3") {
                for sub in ["site-packages", "dist-packages"] {
                    let d = e.path().join(sub);
                    if d.is_dir() {
                        out.push(d);
                    }
                }
            }
        }
        let debian = lib.join("python3/dist-packages");
        if debian.is_dir() {
            out.push(debian);
        }
    }
    out
}

/// `sys.path` of the `python3` on PATH (one process start, only when the guesses found no wheel).
fn python_sys_path() -> Vec<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys; print('\\n'.join(p for p in sys.path if p))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .collect(),
        _ => Vec::new(),
    }
}

/// The CUDA include folder (holding `cuda_bf16.h`) and the list of places tried.
fn find_include(nvrtc_path: &Path) -> (Option<PathBuf>, Vec<String>) {
    let mut cands: Vec<(String, PathBuf)> = Vec::new();
    if let Some(p) = env_dir("GDN_CUDA_INCLUDE") {
        cands.push(("GDN_CUDA_INCLUDE".into(), p));
    }
    if let Some(dir) = nvrtc_path.parent().filter(|d| d.is_absolute()) {
        cands.push(("beside NVRTC".into(), dir.join("../include")));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env_dir(var) {
            cands.push((var.into(), root.join("include")));
        }
    }
    for s in wheel_sites("include") {
        let d = s.join(WHEEL_ROOT).join("include");
        if d.is_dir() {
            cands.push(("wheel".into(), d));
        }
    }
    cands.push((
        "default toolkit".into(),
        Path::new(DEFAULT_TOOLKIT).join("include"),
    ));
    let mut tried = Vec::new();
    for (what, dir) in cands {
        if dir.join(PROBE_HEADER).is_file() {
            let dir = dir.canonicalize().unwrap_or(dir);
            return (Some(dir), tried);
        }
        tried.push(format!("{what} {} (no {PROBE_HEADER})", dir.display()));
    }
    (None, tried)
}
