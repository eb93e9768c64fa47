//! The compilation units: the architectures a kernel module builds for (`Arch`, `Arches`), every module (a source
//! file plus defines) and the builds of one source under the same kernel names (`ModuleBuild`: the device plan's,
//! the serving modes'). The registry's variants name their module from here.

/// Which features of an architecture a target unlocks (the suffix of its NVRTC name).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArchFeatures {
    /// `sm_90`: the features every later GPU keeps.
    Portable,
    /// `sm_100f`: also those shared by the GPUs of this one's family.
    Family,
    /// `sm_90a`: also those of exactly this GPU (wgmma and setmaxnreg on Hopper), which no later GPU has.
    Specific,
}

/// A CUDA target architecture as NVRTC names it: `sm_`, the compute capability (major · 10 + minor) and an
/// optional suffix (`ArchFeatures`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arch {
    pub cc: u32,
    pub features: ArchFeatures,
}

impl Arch {
    /// `sm_<cc>`: the features every later GPU keeps.
    pub const fn portable(cc: u32) -> Arch {
        Arch {
            cc,
            features: ArchFeatures::Portable,
        }
    }

    /// `sm_80`, `sm_90a`, `sm_100f`, ... (lower-case, as NVRTC takes them).
    pub fn parse(name: &str) -> Result<Arch, String> {
        let bad = || {
            format!("'{name}' is not a CUDA architecture (sm_ + compute capability + optional a or f: sm_90a)")
        };
        let rest = name.strip_prefix("sm_").ok_or_else(bad)?;
        let (digits, features) = match rest.as_bytes().last() {
            Some(b'a') => (&rest[..rest.len() - 1], ArchFeatures::Specific),
            Some(b'f') => (&rest[..rest.len() - 1], ArchFeatures::Family),
            _ => (rest, ArchFeatures::Portable),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok(Arch {
            cc: digits.parse().map_err(|_| bad())?,
            features,
        })
    }

    /// The architectures `gdn kernels --arch` names: one (`sm_89`), or `all` (`ARCHES`).
    pub fn targets(arg: &str) -> Result<Vec<Arch>, String> {
        if arg == "all" {
            return Ok(ARCHES.iter().map(|a| Arch::parse(a).unwrap()).collect());
        }
        Ok(vec![Arch::parse(arg)?])
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let suffix = match self.features {
            ArchFeatures::Portable => "",
            ArchFeatures::Family => "f",
            ArchFeatures::Specific => "a",
        };
        write!(f, "sm_{}{suffix}", self.cc)
    }
}

/// Every architecture gdn's kernels are compiled for in CI (`gdn kernels --arch all`): Ampere (A100, A10 and
/// RTX 30), Ada (L40S, RTX 40), Hopper with and without its specific features, Blackwell (B200) with and
/// without them, and Blackwell's workstation GPUs (RTX 50, RTX PRO 6000).
pub const ARCHES: [&str; 8] = [
    "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120",
];

/// The architectures a module compiles for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arches {
    /// Compute capability `cc` and every later one, any suffix: the module uses only features later GPUs keep.
    From(u32),
    /// This one architecture-specific target only: the module needs its `a` features.
    Only(Arch),
}

impl Arches {
    pub fn contains(self, arch: Arch) -> bool {
        match self {
            Arches::From(cc) => arch.cc >= cc,
            Arches::Only(a) => arch == a,
        }
    }
}

impl std::fmt::Display for Arches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arches::From(cc) => write!(f, "sm_{cc} and later"),
            Arches::Only(a) => write!(f, "{a} only"),
        }
    }
}

/// Hopper with its architecture-specific features (wgmma, setmaxnreg).
pub const SM90A: Arch = Arch {
    cc: 90,
    features: ArchFeatures::Specific,
};

/// One NVRTC compilation unit: a source file plus defines. All its exported kernels live in one module.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Module {
    pub id: &'static str,
    pub source: &'static str,
    /// `NAME=VALUE` passed as `-D`.
    pub defines: &'static [&'static str],
    /// The architectures it compiles for (`gdn kernels --arch` builds it for these only; `tests/nvrtc_compile.rs`
    /// checks the claim both ways against NVRTC).
    pub arches: Arches,
}

impl Module {
    pub fn builds_for(&self, arch: Arch) -> bool {
        self.arches.contains(arch)
    }
}

/// Plain CUDA cores (loads, FMAs, warp shuffles): every architecture from Ampere on.
pub const RECURRENT: Module = Module {
    id: "recurrent",
    source: "recurrent.cu",
    defines: &[],
    arches: Arches::From(80),
};

/// recurrent.cu with `GDN_REC_ACT_F16`: its serving kernels (`_sv`, `_kf`) under the same names, reading and writing fp16
/// activations (each value converted exactly to fp32). A module of its own, compiled when an fp16 call first needs it:
/// the bf16 kernels keep their code and registers.
pub const RECURRENT_F16: Module = Module {
    id: "recurrent_f16",
    source: "recurrent.cu",
    defines: &["GDN_REC_ACT_F16=1"],
    arches: RECURRENT.arches,
};

/// Whether `RECURRENT_F16` exports kernel `name` (its serving kernels only).
pub fn in_recurrent_f16(name: &str) -> bool {
    name.ends_with("_sv") || name.ends_with("_kf")
}

/// prefill_fused.cu: the fused tiles. Its math (`mma.sync`, `ldmatrix`), its loads (`cp.async`) and its hand-offs
/// (mbarriers) are Ampere's; on sm_90 and later it waits on mbarriers with `try_wait` and runs under programmatic
/// dependent launch (`griddepcontrol`), below sm_90 with `test_wait` polls and stream order (kernels/common/sm90.cuh).
pub const PREFILL: Module = Module {
    id: "prefill",
    source: "prefill_fused/prefill_fused.cu",
    defines: &[],
    arches: Arches::From(80),
};

/// prefill_chunk64.cu: the "chunk64" prefill plan (prep + walk, with a device workspace) and the cp plan's prep,
/// scans and one-warpgroup passes. Its state walks multiply with warpgroup MMAs (`wgmma`): a feature of sm_90a alone
/// (Blackwell has `tcgen05` instead).
pub const PREFILL64: Module = Module {
    id: "prefill64",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &[],
    arches: Arches::Only(SM90A),
};

/// prefill_chunk64.cu with `GDN_PREFILL64_WIDE`: only the cp plan's two-warpgroup passes. A module of its own so that
/// a process compiles them (as long as the rest of the file together) only when a plan first needs them.
pub const PREFILL64_WIDE: Module = Module {
    id: "prefill64_wide",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_PREFILL64_WIDE=1"],
    arches: PREFILL64.arches,
};

/// The device plan's builds (`plan::prefill::device`, `GDN_DEVICE_PLAN`): the same kernels under the same names, each taking
/// the plan's thresholds before the params (`params::PrefillPlanParams`, `Prefill64PlanParams`) and exiting when the
/// call is not its launch's. Modules of their own, compiled when a device plan first runs: host-planned calls keep
/// their kernels' code exactly.
pub const PREFILL_DP: Module = Module {
    id: "prefill_dp",
    source: "prefill_fused/prefill_fused.cu",
    defines: &["GDN_DEVICE_PLAN=1"],
    arches: PREFILL.arches,
};
pub const PREFILL64_DP: Module = Module {
    id: "prefill64_dp",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_DEVICE_PLAN=1"],
    arches: PREFILL64.arches,
};
pub const PREFILL64_WIDE_DP: Module = Module {
    id: "prefill64_wide_dp",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_PREFILL64_WIDE=1", "GDN_DEVICE_PLAN=1"],
    arches: PREFILL64.arches,
};

/// The serving builds (`GDN_SERVING`, kernels/common/serving.cuh): the same kernels under the same names, whose params
/// carry the pool's row count and the serving block (`abi::params::ServingParams`). A call in any serving mode runs
/// them; a definition-mode call runs the default build, whose params end before that block and whose code has no
/// serving branch (a params struct over 128 bytes and the serving branches cost the definition's walks up to ~5%).
/// Compiled when a serving call first needs them.
pub const PREFILL_SV: Module = Module {
    id: "prefill_sv",
    source: "prefill_fused/prefill_fused.cu",
    defines: &["GDN_SERVING=1"],
    arches: PREFILL.arches,
};
pub const PREFILL_SV_DP: Module = Module {
    id: "prefill_sv_dp",
    source: "prefill_fused/prefill_fused.cu",
    defines: &["GDN_SERVING=1", "GDN_DEVICE_PLAN=1"],
    arches: PREFILL.arches,
};
pub const PREFILL64_SV: Module = Module {
    id: "prefill64_sv",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_SERVING=1"],
    arches: PREFILL64.arches,
};
pub const PREFILL64_SV_DP: Module = Module {
    id: "prefill64_sv_dp",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_SERVING=1", "GDN_DEVICE_PLAN=1"],
    arches: PREFILL64.arches,
};
pub const PREFILL64_WIDE_SV: Module = Module {
    id: "prefill64_wide_sv",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_PREFILL64_WIDE=1", "GDN_SERVING=1"],
    arches: PREFILL64.arches,
};
pub const PREFILL64_WIDE_SV_DP: Module = Module {
    id: "prefill64_wide_sv_dp",
    source: "prefill_chunk64/prefill_chunk64.cu",
    defines: &["GDN_PREFILL64_WIDE=1", "GDN_SERVING=1", "GDN_DEVICE_PLAN=1"],
    arches: PREFILL64.arches,
};

/// Which build of a module a call runs: the device plan's (`device_plan`) and / or the serving build (`serving`) of
/// a prefill module; the fp16-activation build (`act_f16`) of the recurrent module.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModuleBuild {
    pub device_plan: bool,
    pub serving: bool,
    pub act_f16: bool,
}

/// Each module with builds: (the default build, device plan, serving, serving + device plan).
const BUILDS: [(&Module, [&Module; 3]); 3] = [
    (&PREFILL, [&PREFILL_DP, &PREFILL_SV, &PREFILL_SV_DP]),
    (&PREFILL64, [&PREFILL64_DP, &PREFILL64_SV, &PREFILL64_SV_DP]),
    (
        &PREFILL64_WIDE,
        [
            &PREFILL64_WIDE_DP,
            &PREFILL64_WIDE_SV,
            &PREFILL64_WIDE_SV_DP,
        ],
    ),
];

/// The builds of module `m` other than itself (prefill: device plan, serving, serving + device plan; recurrent: fp16
/// activations); empty: `m` has none.
pub fn builds_of(m: &Module) -> Vec<&'static Module> {
    if m.id == RECURRENT.id {
        return vec![&RECURRENT_F16];
    }
    BUILDS
        .into_iter()
        .find(|(base, _)| base.id == m.id)
        .map_or_else(Vec::new, |(_, b)| b.to_vec())
}

/// Build `b` of module `m` (`m` itself for the default build; None: `m` has no such build: the recurrent module has
/// only its fp16 build (its serving kernels are variants of their own), the prefill modules no fp16 build).
pub fn build_module(m: &Module, b: ModuleBuild) -> Option<&'static Module> {
    if m.id == RECURRENT.id {
        return match (b.device_plan, b.serving, b.act_f16) {
            (false, false, false) => Some(&RECURRENT),
            (false, false, true) => Some(&RECURRENT_F16),
            _ => None,
        };
    }
    if b.act_f16 {
        return None;
    }
    let (base, builds) = BUILDS.into_iter().find(|(base, _)| base.id == m.id)?;
    Some(match (b.device_plan, b.serving) {
        (false, false) => base,
        (true, false) => builds[0],
        (false, true) => builds[1],
        (true, true) => builds[2],
    })
}

/// The device plan's build of module `m` (None: `m` has none: decode / MTP).
pub fn device_plan_module(m: &Module) -> Option<&'static Module> {
    build_module(
        m,
        ModuleBuild {
            device_plan: true,
            ..ModuleBuild::default()
        },
    )
}

/// The default module a build `m` is built from (None: `m` is not a build of another module).
pub fn build_base(m: &Module) -> Option<&'static Module> {
    if m.id == RECURRENT_F16.id {
        return Some(&RECURRENT);
    }
    BUILDS
        .into_iter()
        .find(|(_, builds)| builds.iter().any(|b| b.id == m.id))
        .map(|(base, _)| base)
}
