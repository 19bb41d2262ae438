//! pier-cgroups (to be written)
