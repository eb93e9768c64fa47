//! Correctness comparison (OWNER: helper-core-numerics). Stub; to be implemented.
