//! A VM's vhost-user vif from the toolstack's side, end to end: `up` with
//! a `kind = "vm"` domain listens on its socket and prints the VMM
//! arguments, the driver domain's store names the vif, `network-attach`
//! and `network-detach` add and remove one at run time, a path in use is
//! refused, the listener survives a driver-domain restart, and `down`
//! leaves no socket. (The backend that serves the socket is tested with
//! real frontends elsewhere.) Needs root; run under the namespace lock.

mod common;

use common::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn up(env: &Env, topology: &str) -> Output {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("vm.toml");
    std::fs::write(&path, topology).unwrap();
    Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .args(["up", "--config", path.to_str().unwrap()])
        .output()
        .expect("run splitnet up")
}

/// drv, guest1 and VM vm1 on `socket`.
fn topology(socket: &Path) -> String {
    format!(
        "name = \"vm\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         [[domain]]\nname = \"vm1\"\nkind = \"vm\"\nsocket = \"{}\"\nmac = \"52:54:00:12:34:56\"\n",
        socket.display()
    )
}

fn is_socket(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

fn fails_with(o: &Output, needle: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should have failed: {needle}");
    assert!(e.contains(needle), "{e:?} lacks {needle:?}");
}

/// The driver domain's store node for vhost-user vif `name` (empty when
/// absent), and the identity of hv's listener it names, which every node
/// ends with.
fn store_node_and_listener(env: &Env, name: &str) -> (String, u64) {
    let st = env.status();
    let drv = domain(&st, "drv")["id"].as_u64().unwrap();
    let mut ts = hv::Toolstack::connect(&env.run_dir.join("hv.sock")).unwrap();
    let node = ts
        .store_read(&format!("/local/domain/{drv}/splitnet/vhost/{name}"))
        .unwrap_or_default();
    if node.is_empty() {
        return (node, 0);
    }
    let (spec, id) = node
        .rsplit_once(",listener=")
        .unwrap_or_else(|| panic!("{node:?} names no listener"));
    (spec.to_string(), id.parse().expect("a listener id"))
}

/// The driver domain's store node for vhost-user vif `name`, its listener
/// left out.
fn store_node(env: &Env, name: &str) -> String {
    store_node_and_listener(env, name).0
}

/// Whether a vhost-user backend serves `sock`: connected, it answers
/// VHOST_USER_GET_FEATURES (request 1, version 1) within a second.
fn backend_answers(sock: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = UnixStream::connect(sock) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut ask = Vec::new();
    for word in [1u32, 1, 0] {
        ask.extend_from_slice(&word.to_le_bytes());
    }
    let mut reply = [0u8; 20];
    if s.write_all(&ask).is_err() || s.read_exact(&mut reply).is_err() {
        return false;
    }
    let word = |i: usize| u32::from_le_bytes(reply[i..i + 4].try_into().unwrap());
    // The same request, flagged a reply (0x4), with 8 bytes of features.
    word(0) == 1 && word(4) & 0x4 != 0 && word(8) == 8
}

fn sockets(env: &Env) -> (PathBuf, PathBuf) {
    // A directory that does not exist yet: hv makes it.
    let dir = env.run_dir.join("vms");
    (dir.join("vm1.sock"), dir.join("vm2.sock"))
}

#[test]
fn a_vm_vif_is_listened_for_from_up_to_down_and_attached_at_run_time() {
    let Some(env) = Env::new("vm-plumb") else {
        return;
    };
    let (vm1, vm2) = sockets(&env);
    up_lists_and_serves_the_vm(&env, &vm1);
    attach_refusals_and_detach(&env, &vm2);
    // The driver domain restarts; hv's listener (the same socket file) stays,
    // and the new driver domain's store names the vif, and that listener,
    // again.
    let ino = std::fs::metadata(&vm1).unwrap().ino();
    let (_, id) = store_node_and_listener(&env, "vm1");
    env.ok(&["restart", "drv"]);
    assert_eq!(std::fs::metadata(&vm1).unwrap().ino(), ino);
    UnixStream::connect(&vm1).expect("still listening after the restart");
    assert_eq!(
        store_node_and_listener(&env, "vm1"),
        ("mac=52:54:00:12:34:56,bridge=xenbr0".into(), id)
    );

    env.ok(&["down"]);
    assert!(!vm1.exists(), "{} stays after down", vm1.display());
    assert_nothing_left();
}

/// `up` prints the VM's arguments, hv listens, status and the store name
/// its vif, and hv refuses to restart what it does not run.
fn up_lists_and_serves_the_vm(env: &Env, vm1: &std::path::Path) {
    let o = up(env, &topology(vm1));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "up failed: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains(&format!(
            "-chardev socket,id=vm1,path={},reconnect=1 -netdev vhost-user,id=n-vm1,chardev=vm1 \
             -device virtio-net-pci,netdev=n-vm1,mac=52:54:00:12:34:56,vectors=0",
            vm1.display()
        )),
        "{out}"
    );
    assert!(out.contains("--net vhost_user=true"), "{out}");
    assert!(is_socket(vm1), "hv listens on {}", vm1.display());
    UnixStream::connect(vm1).expect("a VMM can connect");
    // hv runs no process for the VM; status lists its vif.
    let st = env.status();
    let names: Vec<&str> = st["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(names, ["drv", "guest1"]);
    let v = &st["vhost_vifs"][0];
    assert_eq!(
        (
            v["name"].as_str(),
            v["kind"].as_str(),
            v["backend_name"].as_str()
        ),
        (Some("vm1"), Some("vm"), Some("drv"))
    );
    assert_eq!(v["socket"], vm1.display().to_string());
    assert_eq!(
        store_node(env, "vm1"),
        "mac=52:54:00:12:34:56,bridge=xenbr0"
    );
    let text = env.ok(&["status"]);
    assert!(
        text.contains("VM VIFS (vhost-user)") && text.contains("vm1 (vm) <-> drv"),
        "{text}"
    );
    fails_with(
        &env.splitnet(&["restart", "vm1"]),
        "vm1 is a VM: hv runs nothing for it",
    );
    let q = env.ok(&["vm-args", "vm1", "--qemu"]);
    assert!(
        q.starts_with("-m 512M ") && q.contains(&format!("path={}", vm1.display())),
        "{q}"
    );
}

/// At run time: a second VM, with a VLAN, the attachments refused, and the
/// detach that removes its socket and store node.
fn attach_refusals_and_detach(env: &Env, vm2: &std::path::Path) {
    let spec = format!(
        "type=vhost-user,socket={},mac=52:54:00:00:00:02,vlan=20",
        vm2.display()
    );
    let out = env.ok(&["network-attach", "vm2", &spec]);
    assert!(
        out.contains("vhost-user vif listening") && out.contains("id=n-vm2"),
        "{out}"
    );
    assert!(is_socket(vm2));
    assert_eq!(
        store_node(env, "vm2"),
        "mac=52:54:00:00:00:02,bridge=xenbr0,vlan=20"
    );
    let list: serde_json::Value =
        serde_json::from_str(&env.ok(&["network-list", "vm2", "--json"])).unwrap();
    assert_eq!(
        (list[0]["type"].as_str(), list[0]["vlan"].as_u64()),
        (Some("vhost-user"), Some(20))
    );
    // Refused: the same socket, a socket someone listens on, a key that
    // does not apply, the name of a guest, a MAC in use.
    let again = format!(
        "type=vhost-user,socket={},mac=52:54:00:00:00:03",
        vm2.display()
    );
    fails_with(
        &env.splitnet(&["network-attach", "vm3", &again]),
        "vif vm2 listens on it",
    );
    let theirs = env.run_dir.join("theirs.sock");
    let _other = UnixListener::bind(&theirs).unwrap();
    let busy = format!(
        "type=vhost-user,socket={},mac=52:54:00:00:00:03",
        theirs.display()
    );
    fails_with(
        &env.splitnet(&["network-attach", "vm3", &busy]),
        "something listens on it",
    );
    fails_with(
        &env.splitnet(&["network-attach", "vm3", &format!("{busy},mtu=9000")]),
        "`mtu` does not apply",
    );
    fails_with(
        &env.splitnet(&["network-attach", "guest1", &again]),
        "guest of the topology",
    );
    let dup = format!(
        "type=vhost-user,socket={}/vm3.sock,mac=52:54:00:12:34:56",
        env.run_dir.display()
    );
    fails_with(&env.splitnet(&["network-attach", "vm3", &dup]), "is in use");
    // Detached by its MAC: the socket and the store node go.
    fails_with(
        &env.splitnet(&["network-detach", "vm2", "52:54:00:00:00:09"]),
        "not 52:54:00:00:00:09",
    );
    env.ok(&["network-detach", "vm2", "52:54:00:00:00:02"]);
    assert!(!vm2.exists(), "{} stays after detach", vm2.display());
    assert_eq!(store_node(env, "vm2"), "");
    fails_with(
        &env.splitnet(&["vm-args", "vm2"]),
        "vm2 has no vhost-user vif",
    );
}

/// A VM vif detached and attached again under the same name, MAC and
/// bridge while the driver domain could not look (stopped) reaches it as
/// one change of its store node, not two. It is still a new listener: the
/// driver domain serves the new socket, not its duplicate of the old.
#[test]
fn a_vm_vif_attached_again_while_the_driver_domain_was_stopped_is_served() {
    let Some(env) = Env::new("vm-again") else {
        return;
    };
    let (vm1, vm2) = sockets(&env);
    let o = up(&env, &topology(&vm1));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let attach = format!(
        "type=vhost-user,socket={},mac=52:54:00:00:00:02",
        vm2.display()
    );
    env.ok(&["network-attach", "vm2", &attach]);
    wait_until("the backend serves vm2", Duration::from_secs(20), || {
        backend_answers(&vm2)
    });
    let (spec, id) = store_node_and_listener(&env, "vm2");
    let pid = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    signal(pid, "STOP");
    let detached = env.splitnet(&["network-detach", "vm2", "52:54:00:00:00:02"]);
    let attached = env.splitnet(&["network-attach", "vm2", &attach]);
    signal(pid, "CONT");
    assert!(detached.status.success(), "{detached:?}");
    assert!(attached.status.success(), "{attached:?}");
    let (again, new_id) = store_node_and_listener(&env, "vm2");
    assert_eq!(again, spec, "the same vif");
    assert_ne!(new_id, id, "a new listener");
    wait_until(
        "the backend serves the new socket",
        Duration::from_secs(20),
        || backend_answers(&vm2),
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn up_refuses_a_vm_socket_someone_listens_on_and_leaves_nothing() {
    let Some(env) = Env::new("vm-busy") else {
        return;
    };
    let (vm1, _) = sockets(&env);
    std::fs::create_dir_all(vm1.parent().unwrap()).unwrap();
    let theirs = UnixListener::bind(&vm1).unwrap();
    fails_with(&up(&env, &topology(&vm1)), "something listens on it");
    assert!(is_socket(&vm1), "their socket is left alone");
    drop(theirs);
    assert_nothing_left();
    // Their listener gone, the stale file is replaced.
    let o = up(&env, &topology(&vm1));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    UnixStream::connect(&vm1).expect("hv listens now");
    env.ok(&["down"]);
    assert!(!vm1.exists());
}

#[test]
fn a_virtio_guest_is_told_its_nic_and_gets_a_socket_in_the_run_directory() {
    let Some(env) = Env::new("vm-virtio") else {
        return;
    };
    let o = up(
        &env,
        "name = \"virtio\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"g1\"\nkind = \"guest\"\nnic = \"virtio\"\naddress = \"10.77.0.1/24\"\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sock = env.run_dir.join("vhost/g1.sock");
    assert!(is_socket(&sock), "{}", sock.display());
    assert_eq!(
        store_node(&env, "g1"),
        "mac=00:16:3e:5e:00:01,bridge=xenbr0,guest=1"
    );
    let st = env.status();
    let g1 = domain(&st, "g1")["id"].as_u64().unwrap();
    let mut ts = hv::Toolstack::connect(&env.run_dir.join("hv.sock")).unwrap();
    let mut key = |k: &str| {
        ts.store_read(&format!("/local/domain/{g1}/splitnet/{k}"))
            .unwrap_or_default()
    };
    assert_eq!(
        (key("nic"), key("nic-mac"), key("ipv4")),
        (
            "virtio".into(),
            "00:16:3e:5e:00:01".into(),
            "10.77.0.1/24".into()
        )
    );
    assert_eq!(st["vhost_vifs"][0]["kind"], "guest");
    fails_with(
        &env.splitnet(&["network-attach", "g1", "bridge=xenbr0"]),
        "runs no netfront",
    );
    fails_with(
        &env.splitnet(&["network-detach", "g1", "0"]),
        "it goes with the guest",
    );
    fails_with(&env.splitnet(&["vm-args", "g1"]), "runs in the guest");
    env.ok(&["down"]);
    assert!(!sock.exists());
    assert_nothing_left();
}

#[test]
fn apply_adds_changes_and_removes_a_vm_and_touches_nothing_else() {
    let Some(env) = Env::new("vm-apply") else {
        return;
    };
    let (vm1, vm2) = sockets(&env);
    let o = up(&env, &topology(&vm1));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g1 = domain(&env.status(), "guest1")["pid"].clone();
    let with_vm2 = |vlan: u16| {
        let text = format!(
            "{}[[domain]]\nname = \"vm2\"\nkind = \"vm\"\nsocket = \"{}\"\nmac = \"52:54:00:00:00:02\"\nvlan = {vlan}\n",
            topology(&vm1),
            vm2.display()
        );
        let p = env.run_dir.join(format!("vm2-{vlan}.toml"));
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let out = env.ok(&["apply", "--config", &with_vm2(20)]);
    assert!(out.contains("add VM vm2"), "{out}");
    assert!(is_socket(&vm2), "hv listens on {}", vm2.display());
    UnixStream::connect(&vm2).expect("a VMM can connect");
    assert_eq!(
        store_node(&env, "vm2"),
        "mac=52:54:00:00:00:02,bridge=xenbr0,vlan=20"
    );
    // A changed entry re-attaches the vif, so only when --restart says.
    fails_with(
        &env.splitnet(&["apply", "--config", &with_vm2(30)]),
        "--restart vm2",
    );
    env.ok(&["apply", "--config", &with_vm2(30), "--restart", "vm2"]);
    assert_eq!(
        store_node(&env, "vm2"),
        "mac=52:54:00:00:00:02,bridge=xenbr0,vlan=30"
    );
    let back = env.run_dir.join("back.toml");
    std::fs::write(&back, topology(&vm1)).unwrap();
    let out = env.ok(&["apply", "--config", back.to_str().unwrap()]);
    assert!(out.contains("remove VM vm2"), "{out}");
    assert!(!vm2.exists(), "{} stays", vm2.display());
    assert_eq!(store_node(&env, "vm2"), "");
    assert!(is_socket(&vm1), "vm1 was not touched");
    assert_eq!(domain(&env.status(), "guest1")["pid"], g1);
    env.ok(&["down"]);
    assert_nothing_left();
}
