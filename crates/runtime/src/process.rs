//! process (to be written)
