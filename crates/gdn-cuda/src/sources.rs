//! Kernel sources: embedded at build time (`build.rs` embeds `kernels/*.cu` and `kernels/*.cuh`), or read
//! from the folder `$GDN_KERNEL_DIR` when that is set (kernel work without rebuilding the binary).
//! Every `.cuh` is handed to NVRTC as an in-memory header, so `#include "gates.cuh"` needs no include path.

include!(concat!(env!("OUT_DIR"), "/sources.rs"));

/// The kernel files one compile sees.
#[derive(Clone, Debug)]
pub struct SourceSet {
    /// (file name, text), sorted by name.
    pub files: Vec<(String, String)>,
    /// `embedded` or the folder they were read from.
    pub origin: String,
}

impl SourceSet {
    /// The embedded sources, or `$GDN_KERNEL_DIR`'s when set.
    pub fn load() -> Result<SourceSet, String> {
        match std::env::var_os("GDN_KERNEL_DIR").filter(|v| !v.is_empty()) {
            Some(dir) => SourceSet::from_dir(std::path::Path::new(&dir)),
            None => Ok(SourceSet::embedded()),
        }
    }

    pub fn embedded() -> SourceSet {
        SourceSet {
            files: EMBEDDED
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
            origin: "embedded".into(),
        }
    }

    pub fn from_dir(dir: &std::path::Path) -> Result<SourceSet, String> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| format!("GDN_KERNEL_DIR {}: {e}", dir.display()))?;
        let mut files = Vec::new();
        for e in rd.flatten() {
            let p = e.path();
            let ext = p.extension().and_then(|x| x.to_str());
            if p.is_file() && matches!(ext, Some("cu") | Some("cuh")) {
                let text =
                    std::fs::read_to_string(&p).map_err(|err| format!("{}: {err}", p.display()))?;
                files.push((e.file_name().to_string_lossy().into_owned(), text));
            }
        }
        files.sort();
        Ok(SourceSet {
            files,
            origin: dir.display().to_string(),
        })
    }

    /// The text of one file.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// Every header (`.cuh`), as NVRTC in-memory headers.
    pub fn headers(&self) -> Vec<(&str, &str)> {
        self.files
            .iter()
            .filter(|(n, _)| n.ends_with(".cuh"))
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect()
    }
}
