//! Decode and MTP calls: one recurrent kernel launch, chosen by the policy for the arguments' shape and the
//! build their serving modes need (`RecurrentArgs::build`: the definition kernels, their `_sv` builds, or the
//! K-first `_kf` kernels), from the recurrent module or, for fp16 activations, its fp16 build (`recurrent_f16`).

use crate::abi::args::RecurrentArgs;
use crate::abi::params::RecurrentParams;
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::kernels::registry::ModuleBuild;
use crate::plan::select;
use cudarc::driver::sys;
use gdn_core::Result;
use std::ffi::c_void;

impl KernelSet {
    /// Launches decode / MTP on `stream`.
    ///
    /// # Safety
    /// Every non-zero pointer must address device memory of this context large enough for the sizes
    /// given (see `RecurrentParams`), and stay valid until the kernel has run.
    pub unsafe fn launch_recurrent(
        &self,
        args: &RecurrentArgs,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        args.validate()?;
        let choice =
            select::choose_recurrent(&args.shape(), &self.caps, self.env_override(), args.build())?;
        let params = args.params();
        let build = ModuleBuild {
            act_f16: args.serving.act_f16,
            ..ModuleBuild::default()
        };
        self.launch(
            &choice,
            build,
            &params as *const RecurrentParams as *mut c_void,
            stream,
        )?;
        Ok(LaunchInfo::recurrent(choice))
    }
}
