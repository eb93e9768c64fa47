//! Random workloads (OWNER: helper-core-numerics). Stub; to be implemented.
