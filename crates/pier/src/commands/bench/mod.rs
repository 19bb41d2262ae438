//! `pier bench` (to be written)
