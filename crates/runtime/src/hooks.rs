//! OCI hooks (to be written)
