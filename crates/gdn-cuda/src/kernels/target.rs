//! The compile target of a device: which architecture gdn's kernels are compiled for on a GPU of compute capability
//! (major, minor), as a CUBIN or as PTX for the driver to compile. Pure (no driver calls), so the rule is tested here.
//!
//! * Hopper (9.0): `sm_90a`, whose modules include the wgmma plans (chunk64, cp, the device plan).
//! * A GPU of an architecture CI compiles for (`ARCHES`: 8.0, 8.6, 8.9, 10.0, 12.0): a CUBIN for it, with the portable
//!   kernels (decode, MTP, the fused prefill).
//! * Any other GPU from 8.0 on (sm_87, sm_103, sm_121, a future one): the portable kernels as PTX of the newest of those
//!   architectures it can run, compiled by the driver at load, with a one-line notice (`TargetChoice::notice`).
//! * Older GPUs are refused, named with their compute capability.
//!
//! `GDN_ARCH` replaces the rule: `sm_XY[a|f]` (a CUBIN: only within the device's major version, at most its minor) or
//! `compute_XY` (PTX of any architecture up to the device's). On an H100/H200, `GDN_ARCH=sm_90` runs the portable
//! kernels as a non-Hopper sm_90 GPU would, and `GDN_ARCH=compute_80` runs Ampere's code (no PDL, polled mbarriers)
//! through the driver's PTX compiler: what an A100 runs.

use super::modules::{Arch, ArchFeatures, ARCHES};

/// The environment variable that replaces the target rule (`target_for`).
pub const ARCH_ENV: &str = "GDN_ARCH";

/// The oldest compute capability gdn runs on (major · 10 + minor): Ampere (`mma.sync` bf16, `cp.async`, mbarriers).
pub const MIN_CC: u32 = 80;

/// Hopper's compute capability and the target its kernels are compiled for (the one `gdn pack` ships).
pub const HOPPER_CC: (i32, i32) = (9, 0);
pub const HOPPER_ARCH: &str = "sm_90a";

/// What NVRTC compiles for: an architecture, as a CUBIN (`sm_XY`) or as PTX for the driver (`compute_XY`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub arch: Arch,
    pub ptx: bool,
}

impl Target {
    /// NVRTC's `--gpu-architecture` value: `sm_90a`, `sm_86`, or `compute_80` for PTX.
    pub fn nvrtc_arch(&self) -> String {
        let sm = self.arch.to_string();
        match self.ptx {
            true => sm.replacen("sm_", "compute_", 1),
            false => sm,
        }
    }

    /// `sm_XY[a|f]` or `compute_XY[a|f]`.
    pub fn parse(name: &str) -> Result<Target, String> {
        match name.strip_prefix("compute_") {
            Some(rest) => Arch::parse(&format!("sm_{rest}")).map(|arch| Target { arch, ptx: true }),
            None => Arch::parse(name).map(|arch| Target { arch, ptx: false }),
        }
        .map_err(|_| {
            format!("'{name}' is not a CUDA target (sm_ or compute_ + compute capability + optional a or f: sm_90a, compute_80)")
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.nvrtc_arch())
    }
}

/// The target for a device, and a line to print when the choice is worth knowing (a PTX fallback, an override).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetChoice {
    pub target: Target,
    pub notice: Option<String>,
}

/// The target for device `name` of compute capability `cc`, or why gdn cannot run there; `force`: `GDN_ARCH`.
pub fn target_for(name: &str, cc: (i32, i32), force: Option<&str>) -> Result<TargetChoice, String> {
    let dev = (cc.0.max(0) * 10 + cc.1.max(0)) as u32;
    if dev < MIN_CC {
        return Err(format!(
            "device '{name}' has compute capability {}.{} (sm_{dev}); gdn's CUDA kernels need compute capability 8.0 \
             (Ampere) or later",
            cc.0, cc.1
        ));
    }
    if let Some(f) = force {
        return forced(name, cc, dev, f);
    }
    if cc == HOPPER_CC {
        return Ok(TargetChoice {
            target: Target::parse(HOPPER_ARCH).expect("a valid target"),
            notice: None,
        });
    }
    let known: Vec<Arch> = ARCHES
        .iter()
        .map(|a| Arch::parse(a).expect("ARCHES parse"))
        .filter(|a| a.features == ArchFeatures::Portable)
        .collect();
    if let Some(a) = known.iter().find(|a| a.cc == dev) {
        return Ok(TargetChoice {
            target: Target {
                arch: *a,
                ptx: false,
            },
            notice: None,
        });
    }
    let below = known
        .iter()
        .filter(|a| a.cc <= dev)
        .max_by_key(|a| a.cc)
        .expect("sm_80 is known and dev >= 80");
    let target = Target {
        arch: *below,
        ptx: true,
    };
    Ok(TargetChoice {
        target,
        notice: Some(format!(
            "gdn: device '{name}' (sm_{dev}) is not an architecture gdn's kernels are compiled and checked for; running \
             the portable kernels as {target} PTX, compiled by the driver"
        )),
    })
}

fn forced(name: &str, cc: (i32, i32), dev: u32, f: &str) -> Result<TargetChoice, String> {
    let t = Target::parse(f).map_err(|e| format!("{ARCH_ENV}: {e}"))?;
    let a = t.arch;
    let refuse = |why: String| {
        Err(format!(
            "{ARCH_ENV}={f} on device '{name}' (compute capability {}.{}): {why}",
            cc.0, cc.1
        ))
    };
    if a.cc < MIN_CC {
        return refuse(format!("gdn's kernels need sm_{MIN_CC} or later"));
    }
    if a.cc > dev {
        return refuse("code for a later architecture does not run on this device".into());
    }
    if !t.ptx {
        if a.cc / 10 != dev / 10 {
            return refuse(format!(
                "a CUBIN runs only on its own major version; compute_{} runs that architecture's code as PTX",
                a.cc
            ));
        }
        if a.features == ArchFeatures::Specific && a.cc != dev {
            return refuse(format!(
                "{a} runs only on compute capability {}.{} itself",
                a.cc / 10,
                a.cc % 10
            ));
        }
    } else if a.features == ArchFeatures::Family && a.cc / 10 != dev / 10 {
        return refuse(format!(
            "compute_{}f runs only on compute capability {}.x",
            a.cc,
            a.cc / 10
        ));
    } else if a.features == ArchFeatures::Specific && a.cc != dev {
        return refuse(format!(
            "compute_{}a runs only on compute capability {}.{} itself",
            a.cc,
            a.cc / 10,
            a.cc % 10
        ));
    }
    Ok(TargetChoice {
        target: t,
        notice: Some(format!(
            "gdn: {ARCH_ENV}={f}: kernels compiled for {t} on '{name}' (sm_{dev})"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(cc: (i32, i32), force: Option<&str>) -> Result<(String, bool), String> {
        target_for("GPU", cc, force).map(|c| (c.target.to_string(), c.notice.is_some()))
    }

    #[test]
    fn each_device_gets_its_own_target_or_the_newest_portable_ptx_below_it() {
        for (cc, want, notice) in [
            ((9, 0), "sm_90a", false),
            ((8, 0), "sm_80", false),
            ((8, 6), "sm_86", false),
            ((8, 9), "sm_89", false),
            ((10, 0), "sm_100", false),
            ((12, 0), "sm_120", false),
            ((8, 7), "compute_86", true),
            ((10, 3), "compute_100", true),
            ((12, 1), "compute_120", true),
            ((13, 0), "compute_120", true),
            ((11, 0), "compute_100", true),
        ] {
            assert_eq!(pick(cc, None), Ok((want.to_string(), notice)), "{cc:?}");
        }
    }

    #[test]
    fn gpus_before_ampere_are_refused_by_name_and_capability() {
        let e = target_for("Tesla T4", (7, 5), None).unwrap_err();
        assert!(
            e.contains("Tesla T4") && e.contains("7.5") && e.contains("8.0"),
            "{e}"
        );
        assert!(target_for("Tesla T4", (7, 5), Some("compute_75")).is_err());
    }

    #[test]
    fn the_override_takes_what_the_device_can_run_and_names_what_it_cannot() {
        assert_eq!(pick((9, 0), Some("sm_90")), Ok(("sm_90".into(), true)));
        assert_eq!(
            pick((9, 0), Some("compute_80")),
            Ok(("compute_80".into(), true))
        );
        assert_eq!(pick((8, 6), Some("sm_80")), Ok(("sm_80".into(), true)));
        for (cc, f, needle) in [
            ((9, 0), "sm_80", "major version"),
            ((9, 0), "sm_100", "later architecture"),
            ((8, 0), "sm_86", "later architecture"),
            ((10, 0), "sm_90a", "major version"),
            ((10, 0), "compute_90a", "9.0 itself"),
            ((12, 0), "compute_100f", "10.x"),
            ((9, 0), "sm_75", "sm_80 or later"),
            ((9, 0), "hopper", "not a CUDA target"),
        ] {
            let e = pick(cc, Some(f)).unwrap_err();
            assert!(e.contains(f) && e.contains(needle), "{f} on {cc:?}: {e}");
        }
    }

    #[test]
    fn targets_print_as_nvrtc_takes_them() {
        for t in ["sm_90a", "sm_100f", "sm_86", "compute_80", "compute_90a"] {
            assert_eq!(Target::parse(t).unwrap().nvrtc_arch(), t);
        }
    }
}
