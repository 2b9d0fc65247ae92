//! Menon 2006's Figures 6 and 8 split cycles by domain as Xenoprof did.

use std::collections::BTreeMap;

/// Cycles per frame by role as Xenoprof split them (Menon 2006 §6.3):
/// time in Xen is hv's plus each domain's hypervisor class, its kernel's
/// work for its hypercalls (the trap into hv, the page-table updates of
/// grant maps and their TLB flushes), which Xen ran in its own code; each
/// domain keeps the rest. Empty without per-domain classes (no profile).
pub(super) fn xen_split(
    by_domain: &BTreeMap<String, f64>,
    role_classes: &BTreeMap<String, BTreeMap<String, f64>>,
) -> BTreeMap<String, f64> {
    if role_classes.is_empty() {
        return BTreeMap::new();
    }
    let hypervisor = prof::CostClass::Hypervisor.name();
    let mut out = by_domain.clone();
    for role in ["guest", "driver"] {
        let Some(&hyp) = role_classes.get(role).and_then(|c| c.get(hypervisor)) else {
            continue;
        };
        if let Some(v) = out.get_mut(role) {
            *v -= hyp;
            *out.entry("hv".into()).or_insert(0.0) += hyp;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xen_time_is_hv_and_the_domains_hypervisor_class() {
        let m = |kv: &[(&str, f64)]| -> BTreeMap<String, f64> {
            kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let by_domain = m(&[
            ("guest", 4000.0),
            ("driver", 15000.0),
            ("hv", 2500.0),
            ("wire", 3000.0),
        ]);
        let mut classes = BTreeMap::new();
        classes.insert(
            "driver".to_string(),
            m(&[
                (prof::CostClass::Hypervisor.name(), 9000.0),
                ("netback", 2000.0),
            ]),
        );
        classes.insert(
            "guest".to_string(),
            m(&[(prof::CostClass::Hypervisor.name(), 500.0)]),
        );
        classes.insert(
            "hv".to_string(),
            m(&[(prof::CostClass::Hypervisor.name(), 2500.0)]),
        );
        let x = xen_split(&by_domain, &classes);
        assert_eq!(x["hv"], 2500.0 + 9000.0 + 500.0);
        assert_eq!(x["driver"], 6000.0);
        assert_eq!(x["guest"], 3500.0);
        assert_eq!(x["wire"], 3000.0, "the wire's cycles stay");
        // The whole is unchanged; without a profile there is no split.
        assert_eq!(x.values().sum::<f64>(), by_domain.values().sum::<f64>());
        assert!(xen_split(&by_domain, &BTreeMap::new()).is_empty());
    }
}
