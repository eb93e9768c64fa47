//! Compiles every registered kernel with NVRTC (no GPU needed) and checks the resource report: every registered
//! kernel is in its module, and no hot kernel spills; for sm_90a with the disk cache's behaviour, and for every
//! other architecture CI covers (`registry::ARCHES`) with the registry's architecture declarations checked both
//! ways: a module compiles for each architecture it declares and fails, on an architecture feature, for each one
//! it does not. Skips when NVRTC is not installed, except under CI=true, where NVRTC (the PyPI wheel) must be found.

use gdn_cuda::kernels::registry::{self, Arch, SM90A};
use gdn_cuda::kernels::report::{self, ModuleReport};
use gdn_cuda::kernels::sources::SourceSet;
use gdn_cuda::runtime::loader;

/// Whether NVRTC is there (under CI=true it must be).
fn nvrtc_available() -> bool {
    if let Err(e) = loader::nvrtc() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but NVRTC is not available: {e}");
        }
        eprintln!("skipping: {e}");
        return false;
    }
    true
}

/// A private cache so that the tests really compile (and exercise the cache write). Both tests of this file use
/// the same folder (the variable is process-wide); only the sm_90a test reads entries back.
fn private_cache() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gdn-nvrtc-test-{}", std::process::id()));
    std::env::set_var("GDN_CACHE_DIR", &dir);
    dir
}

/// The problems of one compiled architecture: a compile error, a registered kernel missing, a hot kernel spilling.
fn problems(arch: Arch, modules: &[ModuleReport], out: &mut Vec<String>) {
    for m in modules.iter().filter(|m| m.compiled.is_some()) {
        if let Some(e) = m.error() {
            out.push(format!("{} ({arch}): {e}", m.module.id));
            continue;
        }
        for k in &m.kernels {
            match &k.resources {
                None => out.push(format!(
                    "{} missing from {} ({arch})",
                    k.variant.name, m.module.id
                )),
                Some(r) if k.variant.hot && r.spills() => out.push(format!(
                    "hot kernel {} spills on {arch}: {r:?}",
                    k.variant.name
                )),
                _ => {}
            }
        }
    }
}

#[test]
fn every_kernel_compiles_for_sm90a_without_spills_in_hot_kernels() {
    if !nvrtc_available() {
        return;
    }
    let dir = private_cache();
    let modules = report::compile_all(SM90A).expect("sources load");
    assert!(
        modules.iter().all(|m| m.compiled.is_some()),
        "every module builds for sm_90a"
    );
    for m in &modules {
        if let Some(Ok(c)) = &m.compiled {
            assert!(!c.from_cache, "fresh cache dir cannot hit");
        }
    }
    let mut problems_found = Vec::new();
    problems(SM90A, &modules, &mut problems_found);
    // second compile: every module from the cache
    let again = report::compile_all(SM90A).expect("sources load");
    for m in &again {
        if let Some(Ok(c)) = &m.compiled {
            assert!(c.from_cache, "{} not cached", m.module.source);
        }
    }
    // a corrupted entry is recompiled, not trusted
    if let Some(Some(Ok(c))) = again.first().map(|m| &m.compiled) {
        let f = c.cache_file.clone().expect("cache file");
        let mut bytes = std::fs::read(&f).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 0xff;
        std::fs::write(&f, bytes).unwrap();
        let third = report::compile_all(SM90A).expect("sources load");
        assert!(
            !matches!(&third[0].compiled, Some(Ok(c)) if c.from_cache),
            "corrupt entry trusted"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(problems_found.is_empty(), "{}", problems_found.join("\n"));
}

#[test]
fn architecture_declarations_agree_with_nvrtc() {
    if !nvrtc_available() {
        return;
    }
    private_cache();
    let sources = SourceSet::load().expect("sources load");
    let modules = registry::modules();
    // builds of one source differ only in defines: they declare the same architectures, so one of each is
    // compiled for the architectures it does not declare
    let mut one_per_source: Vec<&'static registry::Module> = Vec::new();
    for m in &modules {
        match one_per_source.iter().find(|o| o.source == m.source) {
            Some(o) => assert_eq!(
                o.arches, m.arches,
                "{} and {} (both {}) declare different architectures",
                o.id, m.id, m.source
            ),
            None => one_per_source.push(m),
        }
    }
    let mut found = Vec::new();
    for name in registry::ARCHES {
        let arch = Arch::parse(name).unwrap();
        // sm_90a, the architecture every module declares, is the other test's
        if arch != SM90A {
            problems(arch, &report::compile_all(arch).unwrap(), &mut found);
        }
        for m in one_per_source.iter().filter(|m| !m.builds_for(arch)) {
            match report::compile_module(&sources, m, arch).error() {
                None => found.push(format!(
                    "{} compiles for {arch}, which it does not declare ({})",
                    m.id, m.arches
                )),
                // ptxas: "Feature '...' requires .target sm_90 or higher", "Instruction '...' not supported on
                // .target 'sm_100a'": a failure for any other reason is a bug the declaration would hide
                Some(e) if !e.contains(".target") => found.push(format!(
                    "{} fails on {arch} for a reason other than the architecture: {e}",
                    m.id
                )),
                Some(_) => {}
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// A `compute_` target yields PTX for the driver (`kernels::target`: the fallback for an architecture CI does not
/// compile for, and `GDN_ARCH=compute_80`): text for that virtual architecture, NUL-terminated for cuModuleLoadData.
#[test]
fn a_compute_target_compiles_to_ptx_for_the_driver() {
    if !nvrtc_available() {
        return;
    }
    private_cache();
    let sources = SourceSet::load().expect("sources load");
    let headers = sources.headers();
    let m = &registry::RECURRENT;
    let text = registry::module_source(m, sources.get(m.source).unwrap());
    let req = gdn_cuda::runtime::nvrtc::Request {
        name: m.source,
        source: &text,
        headers: &headers,
        arch: "compute_80",
        defines: m.defines,
    };
    let c = gdn_cuda::runtime::nvrtc::compile(&req).expect("compute_80 compiles");
    // the disk cache serves the PTX back
    let again = gdn_cuda::runtime::nvrtc::compile(&req).expect("compute_80 again");
    assert!(
        again.from_cache && again.cubin == c.cubin,
        "PTX not served from the cache"
    );
    assert_eq!(c.cubin.last(), Some(&0u8), "PTX ends with its NUL");
    let ptx = String::from_utf8_lossy(&c.cubin);
    assert!(
        ptx.contains(".target sm_80"),
        "not sm_80 PTX: {}",
        &ptx[..ptx.len().min(400)]
    );
    assert!(
        ptx.contains(".entry gdn_recurrent_f32_t1_v4r2w8"),
        "the kernels are in it"
    );
}
