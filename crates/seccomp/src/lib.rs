//! pier-seccomp (to be written)
