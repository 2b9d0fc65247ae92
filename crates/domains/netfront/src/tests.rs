use super::dev_mcast_groups;

#[test]
fn reads_the_taps_groups_from_dev_mcast() {
    let table = "2    ifb0            1     0     333300000001\n\
                 4    eth0            1     0     333300000001\n\
                 4    eth0            1     0     01005e000001\n\
                 4    eth0            1     0     01005e00zz01\n\
                 4    eth0            1     0     01005e\n\
                 garbage\n";
    assert_eq!(
        dev_mcast_groups(table, "eth0"),
        vec![[0x33, 0x33, 0, 0, 0, 1], [0x01, 0x00, 0x5e, 0, 0, 1]]
    );
    assert!(dev_mcast_groups(table, "eth1").is_empty());
    // Past the backend's filter size every group still counts: the
    // frontend then turns filtering off.
    let many: String = (0..100)
        .map(|i| format!("4 eth0 1 0 01005e0000{i:02x}\n"))
        .collect();
    assert_eq!(dev_mcast_groups(&many, "eth0").len(), 100);
}
