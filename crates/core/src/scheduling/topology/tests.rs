use super::*;

fn filter(terms: &[&[(&str, &str, &[&str])]]) -> NodeFilter {
    let terms = terms
        .iter()
        .map(|t| {
            let mut r = Requirements::new();
            for (k, op, v) in t.iter() {
                r.add_parsed(k, op, v).expect("valid requirement");
            }
            r
        })
        .collect();
    NodeFilter {
        terms,
        tolerations: None,
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn outside_a_filter_no_node_is_counted_and_inside_every_one_is() {
    let on_demand = filter(&[&[
        (labels::CAPACITY_TYPE, "In", &["on-demand"]),
        ("dedicated", "In", &["web"]),
        (labels::ZONE, "In", &["z-a", "z-b"]),
    ]]);
    let counted = |f: &NodeFilter, node: &BTreeMap<String, String>| {
        f.terms.iter().any(|t| t.matches_labels(node))
    };
    let nodes: Vec<BTreeMap<String, String>> = [
        ("on-demand", "web", "z-a"),
        ("spot", "web", "z-a"),
        ("on-demand", "batch", "z-b"),
        ("spot", "batch", "z-c"),
        ("on-demand", "web", "z-c"),
    ]
    .iter()
    .map(|(ct, d, z)| {
        labels(&[
            (labels::CAPACITY_TYPE, ct),
            ("dedicated", d),
            (labels::ZONE, z),
        ])
    })
    .collect();
    // One way out per requirement on another key than the spread's (the zone).
    let ways = on_demand.outside(labels::ZONE);
    assert_eq!(ways.len(), 2);
    for out in &ways {
        assert!(out.get(labels::ZONE).is_none());
        for node in nodes.iter().filter(|n| out.matches_labels(n)) {
            assert!(!counted(&on_demand, node), "{out} admits counted {node:?}");
        }
    }
    let inside = on_demand.inside(labels::ZONE).expect("one term");
    assert!(inside.get(labels::ZONE).is_none());
    for node in nodes.iter().filter(|n| inside.matches_labels(n)) {
        // Outside the filter's zones a node is in no domain the spread counts.
        if node.get(labels::ZONE).map(String::as_str) != Some("z-c") {
            assert!(
                counted(&on_demand, node),
                "{inside} admits uncounted {node:?}"
            );
        }
    }
    // Two terms: held off both; never held on (no one requirement says "either").
    let two = filter(&[
        &[(labels::CAPACITY_TYPE, "In", &["on-demand"])],
        &[("team", "Exists", &[])],
    ]);
    let ways = two.outside(labels::ZONE);
    assert_eq!(ways.len(), 1);
    assert!(ways[0].matches_labels(&labels(&[(labels::CAPACITY_TYPE, "spot")])));
    assert!(!ways[0].matches_labels(&labels(&[(labels::CAPACITY_TYPE, "spot"), ("team", "x")])));
    assert!(two.inside(labels::ZONE).is_none());
    // Taints read too: a tolerated tainted node would not count, so never held on.
    let mut tainted = on_demand.clone();
    tainted.tolerations = Some(Vec::new());
    assert!(tainted.inside(labels::ZONE).is_none());
    // Only the spread's own key, or a bound: nothing to hold by.
    assert!(filter(&[&[(labels::ZONE, "In", &["z-a"])]])
        .outside(labels::ZONE)
        .is_empty());
    assert!(filter(&[&[("cpu", "Gt", &["4"])]])
        .outside(labels::ZONE)
        .is_empty());
}
