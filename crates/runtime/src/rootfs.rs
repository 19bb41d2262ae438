//! rootfs (to be written)
