//! safetensors I/O (OWNER: helper-cli). Stub; to be implemented.
