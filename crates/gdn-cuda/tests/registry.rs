//! The registry against the kernel sources (GPU-free): every registered kernel is exported by its source,
//! every exported kernel is registered, and the params structs' offsets match the .cu files' comments.

use gdn_cuda::kernels::registry;
use gdn_cuda::kernels::sources::SourceSet;
use std::collections::BTreeSet;

/// Names of kernels a source exports when compiled with `defines` (`NAME` or `NAME=VALUE`): `extern "C"
/// __global__` functions, plus instantiations of the files' export macros (`GDN_REC_EXPORT(...)`,
/// `GDN_PREFILL_KERNEL(name, ...)`), in the branches of `#ifdef` / `#ifndef` / `#else` / `#endif` that those
/// defines select (other `#if` conditions are not evaluated: both of their branches count).
fn exported(src: &str, defines: &[&str]) -> BTreeSet<String> {
    // the macro named after #ifdef / #ifndef (a trailing comment ignored)
    let defined = |rest: &str| {
        let m = rest.split_whitespace().next().unwrap_or("");
        defines.iter().any(|d| d.split('=').next() == Some(m))
    };
    let mut out = BTreeSet::new();
    let mut in_macro = false;
    // one entry per open conditional: Some(taken) for #ifdef/#ifndef, None for an unevaluated #if
    let mut conds: Vec<Option<bool>> = Vec::new();
    for line in src.lines().map(str::trim) {
        if let Some(m) = line.strip_prefix("#ifdef ") {
            conds.push(Some(defined(m)));
            continue;
        } else if let Some(m) = line.strip_prefix("#ifndef ") {
            conds.push(Some(!defined(m)));
            continue;
        } else if line.starts_with("#if") {
            conds.push(None);
            continue;
        } else if line.starts_with("#else") {
            if let Some(Some(taken)) = conds.last_mut() {
                *taken = !*taken;
            }
            continue;
        } else if line.starts_with("#endif") {
            conds.pop();
            continue;
        }
        if conds.contains(&Some(false)) {
            continue;
        }
        // macro definitions (with their continuation lines) and comments export nothing
        let continued = in_macro;
        in_macro = (continued || line.starts_with("#define")) && line.ends_with('\\');
        if continued || line.starts_with("#define") || line.starts_with("//") {
            continue;
        }
        let rec = line
            .strip_prefix("GDN_REC_EXPORT(")
            .or_else(|| line.strip_prefix("GDN_REC_EXPORT_EX("))
            .or_else(|| line.strip_prefix("GDN_REC_EXPORT_MODE("));
        if let Some(rest) = rec {
            let a: Vec<&str> = rest
                .trim_end_matches(')')
                .split(',')
                .map(str::trim)
                .collect();
            // (ST, SBYTES, TT, TFIX, VEC, RPT, WARPS[, ORDER, HINT, SUFFIX, MODE])
            let suffix = a.get(9).copied().unwrap_or("");
            out.insert(format!(
                "gdn_recurrent_{}_{}_v{}r{}w{}{suffix}",
                a[0], a[2], a[4], a[5], a[6]
            ));
        } else if let Some(rest) = line
            .strip_prefix("GDN_PREFILL_KERNEL(")
            .or_else(|| line.strip_prefix("GDN_PREFILL_KERNEL_NP("))
            .or_else(|| line.strip_prefix("GDN_PREFILL_SPLIT_KERNEL("))
        {
            out.insert(rest.split(',').next().unwrap().trim().to_string());
        } else if line.starts_with("extern \"C\" __global__") && !line.contains("##") {
            out.insert(kernel_name(line));
        }
    }
    out
}

/// The name declared by an `extern "C" __global__ ...` line: the identifier before the parameter list,
/// after removing a `__launch_bounds__(...)` qualifier.
fn kernel_name(line: &str) -> String {
    let mut l = line.to_string();
    if let Some(at) = l.find("__launch_bounds__(") {
        let open = at + "__launch_bounds__".len();
        let mut depth = 0;
        let mut end = l.len();
        for (i, c) in l[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        l.replace_range(at..end, " ");
    }
    let before_paren = l.split('(').next().unwrap();
    before_paren.split_whitespace().last().unwrap().to_string()
}

#[test]
fn kernel_names_are_parsed_with_and_without_launch_bounds() {
    let src = "extern \"C\" __global__ void plain(const P p) {}\n\
               extern \"C\" __global__ void __launch_bounds__(128) lb1(const P p) {}\n\
               extern \"C\" __global__ void __launch_bounds__(32 * (4 + f<2>()), 1) lb2(const P p) {}\n";
    let got: Vec<String> = exported(src, &[]).into_iter().collect();
    assert_eq!(got, ["lb1", "lb2", "plain"]);
    let gated = "extern \"C\" __global__ void kept(const P p) {}\n\
                 #ifndef WIDE  // the default\n#if 1\n#endif\nextern \"C\" __global__ void narrow(const P p) {}\n\
                 #else  // WIDE\n#ifndef X\n#define X 1\n#endif\nextern \"C\" __global__ void wide(const P p) {}\n\
                 #endif\nextern \"C\" __global__ void after(const P p) {}\n";
    let got: Vec<String> = exported(gated, &[]).into_iter().collect();
    assert_eq!(got, ["after", "kept", "narrow"]);
    let got: Vec<String> = exported(gated, &["WIDE=1"]).into_iter().collect();
    assert_eq!(got, ["after", "kept", "wide"]);
}

#[test]
fn registry_and_sources_agree() {
    let sources = SourceSet::embedded();
    for m in registry::modules() {
        let Some(src) = sources.get(m.source) else {
            panic!("{} is registered but not embedded", m.source);
        };
        // (a device plan's build exports the kernels of the module it is built from: registry::module_variants)
        let ours: BTreeSet<String> = registry::module_variants(m)
            .map(|v| v.name.to_string())
            .collect();
        let theirs = exported(src, m.defines);
        assert_eq!(ours, theirs, "{}: registry vs exported kernels", m.source);
    }
}

/// Offsets written in the field comments of a params struct (`// @16` or `//  16:`), in field order.
fn commented_offsets(s: &SourceSet, name: &str) -> Vec<usize> {
    let head = format!("struct {name} {{");
    let src = s
        .files
        .iter()
        .map(|(_, text)| text.as_str())
        .find(|text| text.contains(&head))
        .unwrap_or_else(|| panic!("no kernel file defines `{head}`"));
    let start = src.find(&head).unwrap();
    let body = &src[start..start + src[start..].find("};").unwrap()];
    body.lines()
        .filter(|l| l.split("//").next().unwrap().contains(';') && l.contains("//"))
        .map(|l| {
            let c = l.split("//").nth(1).unwrap().trim_start();
            let digits: String = c
                .trim_start_matches('@')
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .parse()
                .unwrap_or_else(|_| panic!("no offset in comment: {l}"))
        })
        .collect()
}

#[test]
fn params_offsets_match_the_cuda_comments() {
    use gdn_cuda::abi::params::{PrefillParams, RecurrentParams};
    use std::mem::offset_of;
    let s = SourceSet::embedded();
    let rec = [
        offset_of!(RecurrentParams, q),
        offset_of!(RecurrentParams, k),
        offset_of!(RecurrentParams, v),
        offset_of!(RecurrentParams, a),
        offset_of!(RecurrentParams, b),
        offset_of!(RecurrentParams, a_log),
        offset_of!(RecurrentParams, dt_bias),
        offset_of!(RecurrentParams, state),
        offset_of!(RecurrentParams, new_state),
        offset_of!(RecurrentParams, intermediate),
        offset_of!(RecurrentParams, out),
        offset_of!(RecurrentParams, state_indices),
        offset_of!(RecurrentParams, batch),
        offset_of!(RecurrentParams, num_state_rows),
        offset_of!(RecurrentParams, scale),
        offset_of!(RecurrentParams, seq_len),
        offset_of!(RecurrentParams, num_qk_heads),
        offset_of!(RecurrentParams, num_v_heads),
        offset_of!(RecurrentParams, serving),
    ];
    // the definition build's block (RecurrentCore) and the serving block that extends it
    let mut got = commented_offsets(&s, "RecurrentCore");
    got.extend(commented_offsets(&s, "RecurrentParams : RecurrentCore"));
    assert_eq!(got, rec);
    let pre = [
        offset_of!(PrefillParams, q),
        offset_of!(PrefillParams, k),
        offset_of!(PrefillParams, v),
        offset_of!(PrefillParams, a),
        offset_of!(PrefillParams, b),
        offset_of!(PrefillParams, a_log),
        offset_of!(PrefillParams, dt_bias),
        offset_of!(PrefillParams, cu_seqlens),
        offset_of!(PrefillParams, state),
        offset_of!(PrefillParams, new_state),
        offset_of!(PrefillParams, out),
        offset_of!(PrefillParams, num_seqs),
        offset_of!(PrefillParams, scale),
        offset_of!(PrefillParams, num_q_heads),
        offset_of!(PrefillParams, num_v_heads),
        offset_of!(PrefillParams, lead_rows),
        offset_of!(PrefillParams, num_state_rows),
        offset_of!(PrefillParams, serving),
    ];
    assert_eq!(commented_offsets(&s, "PrefillParams"), pre);
    use gdn_cuda::abi::params::Prefill64Params as P64;
    let pre64 = [
        offset_of!(P64, q),
        offset_of!(P64, k),
        offset_of!(P64, v),
        offset_of!(P64, a),
        offset_of!(P64, b),
        offset_of!(P64, a_log),
        offset_of!(P64, dt_bias),
        offset_of!(P64, cu_seqlens),
        offset_of!(P64, state),
        offset_of!(P64, new_state),
        offset_of!(P64, out),
        offset_of!(P64, workspace),
        offset_of!(P64, num_seqs),
        offset_of!(P64, total_tokens),
        offset_of!(P64, scale),
        offset_of!(P64, num_q_heads),
        offset_of!(P64, num_v_heads),
        offset_of!(P64, seg_chunks),
        offset_of!(P64, num_state_rows),
        offset_of!(P64, serving),
    ];
    assert_eq!(commented_offsets(&s, "Prefill64Params"), pre64);
    for (file, text) in gdn_cuda::abi::params::CUDA_SIZE_ASSERTS {
        assert!(
            s.get(file).unwrap().contains(text),
            "{file}: missing `{text}`"
        );
    }
}

/// `lead_rows` tells the fused kernels how many leading token rows exist in the tensors whatever
/// `cu_seqlens` says (they load sequence 0's first chunk before reading it): never more than T, never more
/// than one chunk, 0 for an empty batch.
#[test]
fn prefill_lead_rows_are_bounded_by_the_tensors_and_one_chunk() {
    use gdn_cuda::abi::args::PrefillArgs;
    for (t, want) in [
        (0usize, 0i32),
        (1, 1),
        (15, 15),
        (16, 16),
        (17, 16),
        (1 << 40, 16),
    ] {
        let args = PrefillArgs {
            total_tokens: t,
            ..Default::default()
        };
        assert_eq!(args.params().lead_rows, want, "T = {t}");
    }
    assert_eq!(registry::prefill::CHUNK, 16);
}

mod table {
    use gdn_cuda::kernels::registry::*;

    /// Kernel names are unique in the table.
    #[test]
    fn names_are_unique() {
        for (i, a) in VARIANTS.iter().enumerate() {
            assert!(
                VARIANTS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
    }

    /// Every launch constant the table states as a C++ expression is appended to its module's compile (and the
    /// device plan's builds check their own constants and those of the module they are built from).
    #[test]
    fn prefill64_constants_are_checked_against_the_source() {
        let text = checks_appendix(&PREFILL64);
        for (expr, value) in [
            (prefill64::PREP_SMEM_EXPR, prefill64::PREP_SMEM as u64),
            (prefill64::WALK_SMEM_EXPR, prefill64::WALK_SMEM as u64),
            (prefill64::WS_CHUNK_BYTES_EXPR, prefill64::WS_CHUNK_BYTES),
            (prefill64::CP_EXACT_EXPR, prefill64::CP_EXACT),
        ] {
            assert!(
                text.contains(&format!("({expr}), {value}>")),
                "{expr} not checked:\n{text}"
            );
        }
        // prep + two walks + two pass-1 + two scans + two pass-3 (dynamic smem each) + params size + the
        // workspace constant + the no-cut bit
        assert_eq!(text.matches("gdn_registry_check<").count(), 9 + 3);
        assert!(text.contains("(gdn_prefill64::SCAN_SMEM), 147472>"));
        assert!(text.contains("(sizeof(Prefill64Params)), 128>"));
        assert!(!checks_appendix(&PREFILL).contains("gdn_prefill64"));
        // the serving build: the same kernels' checks and its own (longer) params
        let sv = checks_appendix(&PREFILL64_SV);
        assert_eq!(sv.matches("gdn_registry_check<").count(), 9 + 3);
        assert!(sv.contains("(sizeof(Prefill64Params)), 272>"));
        assert!(!sv.contains("(sizeof(Prefill64Params)), 128>"));
        // the wide module: its four passes' smem and the params size, nothing of the other module
        let wide = checks_appendix(&PREFILL64_WIDE);
        assert_eq!(wide.matches("gdn_registry_check<").count(), 4 + 1);
        assert_eq!(
            wide.matches("(gdn_prefill64::WALK2_SMEM), 152592>").count(),
            4
        );
        assert!(!wide.contains("WALK_SMEM)") && !wide.contains("PREP_SMEM"));
        // the device plan's builds: the same kernels' checks, the base params and workspace constants, their own
        // params size and (prefill64_dp) the sequence limit and the persistent launches' count (vgrid)
        let dp = checks_appendix(&PREFILL64_DP);
        assert_eq!(dp.matches("gdn_registry_check<").count(), 9 + 2 + 3);
        assert!(!dp.contains("(sizeof(Prefill64Params))"));
        assert!(dp.contains("(sizeof(Prefill64PlanParams)), 224>"));
        assert!(dp.contains("(DEVICE_PLAN_MAX_N), 256>"));
        assert!(dp.contains("(DP_LAUNCHES), 5>"));
        let wide_dp = checks_appendix(&PREFILL64_WIDE_DP);
        assert_eq!(wide_dp.matches("gdn_registry_check<").count(), 4 + 1);
        assert!(checks_appendix(&PREFILL_DP).contains("(sizeof(PrefillPlanParams)), 128>"));
        assert!(checks_appendix(&PREFILL_SV_DP).contains("(sizeof(PrefillPlanParams)), 272>"));
        assert!(
            checks_appendix(&PREFILL64_WIDE_SV_DP).contains("(sizeof(Prefill64PlanParams)), 368>")
        );
        assert_eq!(
            modules()
                .iter()
                .filter(|m| m.source == "prefill_chunk64/prefill_chunk64.cu")
                .count(),
            8
        );
        let sv_dp = ModuleBuild {
            device_plan: true,
            serving: true,
            ..ModuleBuild::default()
        };
        let f16 = ModuleBuild {
            act_f16: true,
            ..ModuleBuild::default()
        };
        assert_eq!(build_module(&RECURRENT, f16), Some(&RECURRENT_F16));
        assert_eq!(build_module(&PREFILL, f16), None);
        assert_eq!(build_base(&RECURRENT_F16), Some(&RECURRENT));
        assert!(module_variants(&RECURRENT_F16).all(|v| in_recurrent_f16(v.name)));
        assert_eq!(
            module_variants(&RECURRENT_F16).count(),
            module_variants(&RECURRENT)
                .filter(|v| v.name.ends_with("_sv") || v.name.ends_with("_kf"))
                .count()
        );
        assert!(module_variants(&RECURRENT_F16).count() >= 19);
        assert_eq!(build_module(&PREFILL, sv_dp), Some(&PREFILL_SV_DP));
        assert_eq!(build_module(&PREFILL_SV, sv_dp), None);
        assert_eq!(build_base(&PREFILL64_WIDE_SV), Some(&PREFILL64_WIDE));
        assert_eq!(
            module_variants(&PREFILL_SV_DP).count(),
            module_variants(&PREFILL).count()
        );
        assert_eq!(
            device_plan_module(&PREFILL64_WIDE),
            Some(&PREFILL64_WIDE_DP)
        );
        assert_eq!(device_plan_module(&RECURRENT), None);
        assert_eq!(
            module_variants(&PREFILL64_DP).count(),
            module_variants(&PREFILL64).count()
        );
        assert!(checks_appendix(&PREFILL).contains("(gdn_prefill::C), 16>"));
    }

    /// Architecture names parse as NVRTC spells them (and print back the same); `all` is the CI list.
    #[test]
    fn architectures_parse() {
        for (name, cc, features) in [
            ("sm_80", 80, ArchFeatures::Portable),
            ("sm_90a", 90, ArchFeatures::Specific),
            ("sm_100f", 100, ArchFeatures::Family),
            ("sm_120", 120, ArchFeatures::Portable),
        ] {
            let a = Arch::parse(name).unwrap();
            assert_eq!((a.cc, a.features), (cc, features), "{name}");
            assert_eq!(a.to_string(), name);
        }
        for bad in [
            "",
            "all",
            "sm90a",
            "sm_",
            "sm_9",
            "sm_9x",
            "sm_90b",
            "compute_90a",
            "SM_90",
            "sm_1000",
        ] {
            assert!(Arch::parse(bad).is_err(), "{bad:?} parsed");
        }
        let all = Arch::targets("all").unwrap();
        assert_eq!(all.len(), ARCHES.len());
        assert!(all.iter().zip(ARCHES).all(|(a, n)| a.to_string() == n));
        assert_eq!(
            Arch::targets("sm_89").unwrap(),
            vec![Arch::parse("sm_89").unwrap()]
        );
        assert!(Arch::targets("sm_89,sm_90").is_err());
        assert_eq!(Arch::parse(gdn_cuda::plan::HOPPER_ARCH).unwrap(), SM90A);
    }

    /// Which modules each architecture builds: decode, MTP and the fused prefill everywhere from Ampere on (a future
    /// architecture too), the chunk64 / cp modules on sm_90a alone; a device plan's build declares what the module it
    /// is built from declares.
    #[test]
    fn modules_are_selected_by_architecture() {
        let ids = |name: &str| -> Vec<&str> {
            modules_for(Arch::parse(name).unwrap())
                .iter()
                .map(|m| m.id)
                .collect()
        };
        for name in [
            "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_100a", "sm_100f", "sm_120", "sm_130",
        ] {
            assert_eq!(
                ids(name),
                [
                    "recurrent",
                    "prefill",
                    "recurrent_f16",
                    "prefill_dp",
                    "prefill_sv",
                    "prefill_sv_dp"
                ],
                "{name}"
            );
        }
        assert_eq!(ids("sm_90a").len(), modules().len());
        assert!(ids("sm_75").is_empty());
        for m in modules() {
            if let Some(dp) = device_plan_module(m) {
                assert_eq!(dp.arches, m.arches, "{}", dp.id);
            }
        }
        assert!(Arches::From(90).contains(Arch::parse("sm_90a").unwrap()));
        assert!(!Arches::Only(SM90A).contains(Arch::parse("sm_90").unwrap()));
        assert_eq!(Arches::Only(SM90A).to_string(), "sm_90a only");
        assert_eq!(Arches::From(80).to_string(), "sm_80 and later");
    }
}
