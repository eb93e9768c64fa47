//! The one-kernel choice for any call: a decode / MTP call's kernel (`decode::choose`), or a prefill call's fused
//! kernel (`prefill::host::fused_launch`; a prefill call's whole plan is `prefill::choose`).

use crate::plan::prefill::host;
use crate::plan::prefill::overrides::HOST_PLAN_OVERRIDE;
use crate::plan::{decode, DeviceCaps, Launch, Rejection, Shape};
use gdn_core::Op;

/// Chooses the kernel for `s` on a device with `caps`; `force` (`GDN_KERNEL`) names a variant to use instead
/// (`host`, which only steers prefill plans, names none). For prefill this is the kernel of the *fused* plan only:
/// prefill calls go through `prefill::choose`, which decides between the fused, chunk64, cp and device plans.
pub fn choose(s: &Shape, caps: &DeviceCaps, force: Option<&str>) -> Result<Launch, Rejection> {
    let force = force.filter(|f| *f != HOST_PLAN_OVERRIDE);
    match s.op {
        Op::Prefill => host::fused_launch(s, caps, force),
        Op::Decode | Op::Mtp => decode::choose(s, caps, force),
    }
}

/// The kernel of a decode / MTP call `s` that needs recurrent.cu's `build` (`choose` assumes the definition
/// build: a call without serving modes); `force` as for `choose`.
pub fn choose_recurrent(
    s: &Shape,
    caps: &DeviceCaps,
    force: Option<&str>,
    build: decode::Build,
) -> Result<Launch, Rejection> {
    let force = force.filter(|f| *f != HOST_PLAN_OVERRIDE);
    decode::choose_build(s, caps, force, build)
}
