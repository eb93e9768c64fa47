//! Kernel sources: embedded at build time (`build.rs` embeds every `.cu` and `.cuh` under `kernels/`), or read
//! from the folder `$GDN_KERNEL_DIR` when that is set (kernel work without rebuilding the binary).
//! A file is named by its path relative to `kernels/` with `/` separators (`recurrent.cu`,
//! `prefill_fused/prefill_fused.cu`, `common/sm90.cuh`). Every `.cuh` is handed to NVRTC as an in-memory header
//! under that name, so `#include "common/gates.cuh"` needs no include path (the tools under tools/ compile with NVRTC and
//! `-I crates/gdn-cuda/kernels`, which resolves the same names).

include!(concat!(env!("OUT_DIR"), "/sources.rs"));

/// The kernel files one compile sees.
#[derive(Clone, Debug)]
pub struct SourceSet {
    /// (name relative to the kernels folder, `/`-separated; text), sorted by name.
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

    /// The kernel files under `dir`, in subfolders too, named as the embedded ones.
    pub fn from_dir(dir: &std::path::Path) -> Result<SourceSet, String> {
        fn walk(
            root: &std::path::Path,
            dir: &std::path::Path,
            files: &mut Vec<(String, String)>,
        ) -> Result<(), String> {
            let rd = std::fs::read_dir(dir)
                .map_err(|e| format!("GDN_KERNEL_DIR {}: {e}", dir.display()))?;
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(root, &p, files)?;
                    continue;
                }
                let ext = p.extension().and_then(|x| x.to_str());
                if p.is_file() && matches!(ext, Some("cu") | Some("cuh")) {
                    let text = std::fs::read_to_string(&p)
                        .map_err(|err| format!("{}: {err}", p.display()))?;
                    let name: Vec<String> = p
                        .strip_prefix(root)
                        .unwrap()
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    files.push((name.join("/"), text));
                }
            }
            Ok(())
        }
        let mut files = Vec::new();
        walk(dir, dir, &mut files)?;
        files.sort();
        Ok(SourceSet {
            files,
            origin: dir.display().to_string(),
        })
    }

    /// The text of one file, by its name relative to the kernels folder (`prefill_chunk64/prefill_chunk64.cu`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// Every header (`.cuh`), as NVRTC in-memory headers named by their relative paths.
    pub fn headers(&self) -> Vec<(&str, &str)> {
        self.files
            .iter()
            .filter(|(n, _)| n.ends_with(".cuh"))
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels folder read at run time names its files as the build embedded them: relative paths with `/`,
    /// subfolders included, every `#include "..."` of a kernel file resolvable among them.
    #[test]
    fn from_dir_matches_the_embedded_set() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let read = SourceSet::from_dir(&dir).unwrap();
        let embedded = SourceSet::embedded();
        assert_eq!(read.files, embedded.files);
        assert!(embedded.get("common/sm90.cuh").is_some());
        assert!(embedded.get("prefill_fused/prefill_fused.cu").is_some());
        assert!(embedded.files.iter().all(|(n, _)| !n.contains('\\')));
        for (name, text) in &embedded.files {
            for line in text.lines() {
                if let Some(rest) = line.trim().strip_prefix("#include \"") {
                    let inc = rest.split('"').next().unwrap();
                    assert!(
                        embedded.get(inc).is_some(),
                        "{name}: #include \"{inc}\" not found"
                    );
                }
            }
        }
    }
}
