//! Where a domain's batch thread runs: on the core its caller last rang
//! from, as Xen ran a hypercall on the calling CPU, so that neither
//! wake-up of a round trip (the caller's doorbell, hv's answer) is an
//! interrupt to another core.

/// A batch thread's place: the cores it may move to, and where it is.
pub(super) struct CallerCore {
    /// The cores hv may use; empty when the thread never moves.
    allowed: Vec<usize>,
    /// The core this thread is pinned to, if any.
    on: Option<usize>,
}

impl CallerCore {
    /// Follows its callers if `follow`; otherwise never moves.
    pub(super) fn new(follow: bool) -> CallerCore {
        let allowed = match follow {
            true => sys::allowed_cpus().unwrap_or_default(),
            false => Vec::new(),
        };
        CallerCore { allowed, on: None }
    }

    /// Moves this thread to core `hint` (the caller's word, a peer's, in
    /// `batch::CPU_OFF`) if [`wanted`] says so and the caller's own
    /// process may run there: `domain_cores`, asked only then, gives its
    /// cores (None: it has no process of its own).
    pub(super) fn follow(&mut self, hint: u32, domain_cores: impl FnOnce() -> Option<Vec<usize>>) {
        let Some(c) = wanted(&self.allowed, self.on, hint) else {
            return;
        };
        if domain_cores().is_some_and(|d| !d.contains(&c)) {
            return;
        }
        if sys::set_thread_cpus(&[c]).is_ok() {
            self.on = Some(c);
        }
    }
}

/// The core `hint` names, if a thread on `on` should move there: one of
/// hv's cores `allowed`, when there are two or more, and not where it is.
fn wanted(allowed: &[usize], on: Option<usize>, hint: u32) -> Option<usize> {
    let c = usize::try_from(hint).ok()?;
    (allowed.len() >= 2 && allowed.contains(&c) && on != Some(c)).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_moves_only_to_one_of_hvs_cores_that_the_caller_may_use() {
        let hv = [0, 2, 3];
        assert_eq!(wanted(&hv, None, 2), Some(2));
        assert_eq!(wanted(&hv, None, 1), None, "not one of hv's cores");
        assert_eq!(wanted(&hv, Some(2), 2), None, "already there");
        for hostile in [u32::MAX, 4096, 1 << 31] {
            assert_eq!(wanted(&hv, None, hostile), None, "hint {hostile}");
        }
        assert_eq!(wanted(&[0], None, 0), None, "one core: nowhere to go");
        assert_eq!(wanted(&[], None, 0), None, "off: never moves");

        // A core hv may use but the caller's process may not: no move.
        let mut c = CallerCore {
            allowed: hv.to_vec(),
            on: None,
        };
        c.follow(2, || Some(vec![0, 3]));
        assert_eq!(c.on, None);
        let mut off = CallerCore::new(false);
        off.follow(0, || None);
        assert_eq!(off.on, None, "off never moves");
    }
}
