//! (to be written: see lib.rs for the module's owner and purpose)
