//! Owner ids and the random numbers they and other fresh names are made of: a module of
//! their own at the bottom, so that any part of the crate can draw one without importing
//! what a holder or a backend is.

/// A fresh owner id: 16 random hex digits, safe in environment variables and shells.
pub fn new_owner_id() -> String {
    format!("{:016x}", random_u64())
}

/// 64 random bits straight from the kernel (one `getrandom`). Cheaper than `rand::random`
/// for the one or two numbers a run needs: no generator to seed, no CPU feature detection
/// (`cpuid`, slow in virtual machines) and no fork handler.
pub fn random_u64() -> u64 {
    use rand::RngCore;
    rand::rngs::OsRng.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_differ() {
        assert_ne!(new_owner_id(), new_owner_id());
        assert_eq!(new_owner_id().len(), 16);
    }
}
