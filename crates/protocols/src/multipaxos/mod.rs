//! MultiPaxos (in progress in this commit: the full protocol lands next).
use crate::registry::Setup;
use synod_core::Protocol;

pub fn build(_setup: &Setup) -> Result<Box<dyn Protocol>, String> {
    Err("multipaxos is being written".into())
}
