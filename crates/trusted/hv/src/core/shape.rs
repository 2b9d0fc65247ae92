//! What of hv's image is its state rather than its traffic: a guardian's
//! record (the toolstack's `guardian`) is written again only when its shape
//! changed, and counters that move with every request are not a change.

use super::handover::HvImage;
use super::store_journal::JournalImage;
use crate::hvm::Accounts;
use crate::status::Counters;
use serde_json::value::RawValue;

/// What [`HvImage::with_traffic_aside`] holds while it lends the image out.
struct Traffic {
    counters: Counters,
    domains: Vec<Counters>,
    accounts: Vec<Accounts>,
    /// The store, whole, while its shape stands in for it.
    store: Option<Box<RawValue>>,
    /// How far the store's journal goes: an entry that changed nothing (a
    /// value written again) needs no record, as the journal the guardian
    /// holds has it.
    journal: Option<JournalImage>,
}

impl HvImage {
    /// Calls `f` with the image's traffic set aside, then puts it back:
    /// hv's counters (but for its own upgrades and recoveries, `hv_*`,
    /// which are its history), each domain's counters, each HVM guest's
    /// exit accounts, and, with the store's shape standing in for the
    /// store, the store's counters and the statistics the domains publish
    /// in it every half second (they publish them again after a crash),
    /// and how far the store's journal goes (not which journal it is).
    /// Only an image taken for hv's guardian has the store's shape; any
    /// other is lent with its store whole.
    pub fn with_traffic_aside<R>(&mut self, f: impl FnOnce(&HvImage) -> R) -> R {
        let traffic = Traffic::take(self);
        let r = f(self);
        traffic.put_back(self);
        r
    }
}

impl Traffic {
    fn take(image: &mut HvImage) -> Traffic {
        let history = Counters {
            ops: (image.counters.ops.iter())
                .filter(|(op, _)| op.starts_with("hv_"))
                .map(|(op, n)| (op.clone(), *n))
                .collect(),
            errors: Default::default(),
        };
        let store =
            (image.store_shape.take()).map(|shape| std::mem::replace(&mut image.store, shape));
        let journal = image.journal;
        if let Some(j) = &mut image.journal {
            (j.seq, j.start, j.end) = (0, 0, 0);
        }
        Traffic {
            journal,
            counters: std::mem::replace(&mut image.counters, history),
            domains: (image.domains.iter_mut())
                .map(|d| std::mem::take(&mut d.counters))
                .collect(),
            accounts: (image.hvm.iter_mut())
                .map(|g| std::mem::take(&mut g.accounts))
                .collect(),
            store,
        }
    }

    fn put_back(self, image: &mut HvImage) {
        image.journal = self.journal;
        image.counters = self.counters;
        for (d, c) in image.domains.iter_mut().zip(self.domains) {
            d.counters = c;
        }
        for (g, a) in image.hvm.iter_mut().zip(self.accounts) {
            g.accounts = a;
        }
        if let Some(whole) = self.store {
            image.store_shape = Some(std::mem::replace(&mut image.store, whole));
        }
    }
}
