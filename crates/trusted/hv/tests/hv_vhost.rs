//! vhost-user vifs' listeners in process: hv owns each listening socket,
//! hands a duplicate to the backing driver domain only, connects a `nic =
//! "virtio"` guest to its own vif only, refuses a path in use, removes the
//! socket file with the vif, and keeps the listener across a driver
//! domain's restart. Run under the namespace lock (the domains' memory is
//! `splitnet-*` memfds): `flock /tmp/splitnet-ns.lock cargo test -p
//! splitnet-hv --test hv_vhost`.

mod common;
use common::domain;

use hv::{ErrorKind, HvClient, Hypervisor, VhostSpec};
use splitnet_hv as hv;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A fresh directory for this test's sockets (removed at the end).
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("splitnet-vhost-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Dir(d)
    }
    fn sock(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.sock"))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn vm(name: &str, socket: &Path, backend: &str) -> VhostSpec {
    VhostSpec {
        name: name.into(),
        socket: socket.into(),
        backend: backend.into(),
        guest: None,
        dial: false,
    }
}

/// Accepts one connection on a non-blocking listener, waiting up to 5 s.
fn accept(l: &UnixListener) -> UnixStream {
    let s = testutil::wait_until("a connection", Duration::from_secs(5), || {
        match l.accept() {
            Ok((s, _)) => Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(e),
            Err(e) => panic!("accept: {e}"),
        }
    });
    s.set_nonblocking(false).unwrap();
    s
}

/// Bytes go both ways between two connected ends.
fn talk(a: &mut UnixStream, b: &mut UnixStream) {
    a.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    b.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    b.write_all(b"pong").unwrap();
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");
}

fn listener(c: &mut HvClient, name: &str) -> UnixListener {
    UnixListener::from(
        c.vhost_listener(name)
            .expect("the backend gets its listener"),
    )
}

#[test]
fn only_the_backing_driver_domain_gets_the_listener() {
    let dir = Dir::new("backend");
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut drv2 = domain(&hv, "drv2", "driver");
    let mut g = domain(&hv, "guest1", "guest");
    let path = dir.sock("vm1");
    hv.vhost_add(vm("vm1", &path, "drv")).unwrap();
    let l = listener(&mut drv, "vm1");
    // What QEMU does: connect by path; the driver domain accepts it.
    let mut qemu = UnixStream::connect(&path).unwrap();
    let mut served = accept(&l);
    talk(&mut qemu, &mut served);
    for (who, c) in [("drv2", &mut drv2), ("guest1", &mut g)] {
        let e = c.vhost_listener("vm1").unwrap_err();
        assert_eq!(e.kind, ErrorKind::PermissionDenied, "{who}: {e}");
        assert!(e.to_string().contains("drv does"), "{e}");
    }
    let e = drv.vhost_listener("vm9").unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadDomain);
    assert!(
        e.to_string().contains("no vhost-user vif named \"vm9\""),
        "{e}"
    );
    // An external VM's vif is not a guest's to connect to.
    let e = g.vhost_connect().unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    hv.shutdown();
    assert!(!path.exists(), "shutdown leaves {}", path.display());
}

/// Each listener has its own identity: the same vif added again after a
/// remove gets a new one, and a removed vif has none.
#[test]
fn a_vif_added_again_has_a_new_listener_identity() {
    let dir = Dir::new("ids");
    let hv = Hypervisor::new();
    let path = dir.sock("vm1");
    assert_eq!(hv.vhost_listener_id("vm1"), None);
    hv.vhost_add(vm("vm1", &path, "drv")).unwrap();
    hv.vhost_add(vm("vm2", &dir.sock("vm2"), "drv")).unwrap();
    let first = hv.vhost_listener_id("vm1").unwrap();
    assert_ne!(hv.vhost_listener_id("vm2"), Some(first));
    assert!(hv.vhost_remove("vm1"));
    assert_eq!(hv.vhost_listener_id("vm1"), None);
    hv.vhost_add(vm("vm1", &path, "drv")).unwrap();
    let again = hv.vhost_listener_id("vm1").unwrap();
    assert!(again != first && Some(again) != hv.vhost_listener_id("vm2"));
    hv.shutdown();
}

#[test]
fn only_the_virtio_guest_connects_to_its_own_vif() {
    let dir = Dir::new("guest");
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "g1", "guest");
    let mut g2 = domain(&hv, "g2", "guest");
    let path = dir.sock("g1");
    let mut spec = vm("g1", &path, "drv");
    spec.guest = Some("g1".into());
    hv.vhost_add(spec).unwrap();
    let l = listener(&mut drv, "g1");
    let mut front = UnixStream::from(g1.vhost_connect().unwrap());
    let mut back = accept(&l);
    talk(&mut front, &mut back);
    // After the backend hung up, the guest connects again.
    drop(back);
    let mut b = [0u8; 1];
    assert_eq!(front.read(&mut b).unwrap(), 0);
    let mut front = UnixStream::from(g1.vhost_connect().unwrap());
    let mut back = accept(&l);
    talk(&mut front, &mut back);
    for (who, c) in [("g2", &mut g2), ("drv", &mut drv)] {
        let e = c.vhost_connect().unwrap_err();
        assert_eq!(e.kind, ErrorKind::PermissionDenied, "{who}: {e}");
        assert!(e.to_string().contains("no vhost-user vif"), "{e}");
    }
    // The guest may not take its backend's listener.
    let e = g1.vhost_listener("g1").unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    assert!(hv.vhost_remove("g1"));
    assert!(!path.exists());
    assert!(!hv.vhost_remove("g1"));
    let e = g1.vhost_connect().unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    hv.shutdown();
}

#[test]
fn a_path_in_use_or_not_a_socket_is_refused_and_a_stale_one_replaced() {
    let dir = Dir::new("paths");
    let hv = Hypervisor::new();
    // A live socket someone else listens on.
    let busy = dir.sock("busy");
    std::fs::create_dir_all(&dir.0).unwrap();
    let other = UnixListener::bind(&busy).unwrap();
    let e = hv.vhost_add(vm("vm1", &busy, "drv")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InUse);
    assert!(e.to_string().contains("something listens on it"), "{e}");
    assert!(busy.exists(), "a refused path is left alone");
    // Not a socket.
    let file = dir.0.join("plain");
    std::fs::write(&file, b"x").unwrap();
    let e = hv.vhost_add(vm("vm1", &file, "drv")).unwrap_err();
    assert!(e.to_string().contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    // Relative paths are refused.
    let e = hv
        .vhost_add(vm("vm1", Path::new("vm1.sock"), "drv"))
        .unwrap_err();
    assert!(e.to_string().contains("not an absolute path"), "{e}");
    // A stale socket (its listener closed, its file left) is replaced.
    drop(other);
    hv.vhost_add(vm("vm1", &busy, "drv")).unwrap();
    UnixStream::connect(&busy).expect("hv listens now");
    // The same path or name twice.
    let e = hv.vhost_add(vm("vm2", &busy, "drv")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InUse);
    assert!(e.to_string().contains("vif vm1 listens on it"), "{e}");
    let e = hv.vhost_add(vm("vm1", &dir.sock("x"), "drv")).unwrap_err();
    assert!(e.to_string().contains("exists already"), "{e}");
    // A missing parent directory is made.
    let deep = dir.0.join("a/b/vm3.sock");
    hv.vhost_add(vm("vm3", &deep, "drv")).unwrap();
    assert_eq!(hv.vhost_vifs().len(), 2);
    assert!(hv.vhost_remove("vm1") && hv.vhost_remove("vm3"));
    assert!(!busy.exists() && !deep.exists());
}

#[test]
fn a_restarted_driver_domain_gets_the_same_listener() {
    let dir = Dir::new("restart");
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let path = dir.sock("vm1");
    hv.vhost_add(vm("vm1", &path, "drv")).unwrap();
    let l = listener(&mut drv, "vm1");
    let first = UnixStream::connect(&path).unwrap();
    drop(accept(&l));
    drop(first);
    // The driver domain dies with its copy of the listener.
    assert!(hv.destroy_domain(drv.domid(), "test: killed"));
    drop((l, drv));
    // QEMU's reconnect=1 connects while no driver domain runs: the
    // connection waits in hv's listener.
    let mut qemu = UnixStream::connect(&path).expect("the listener outlives its driver domain");
    let mut drv = domain(&hv, "drv", "driver");
    let fd: OwnedFd = drv.vhost_listener("vm1").unwrap();
    let mut served = accept(&UnixListener::from(fd));
    talk(&mut qemu, &mut served);
    hv.shutdown();
    assert!(!path.exists());
}

/// A VM that listens itself (`socket_server = "vm"`): hv binds nothing,
/// dials the VM's socket for the backing driver domain only (again after
/// the VM hung up), says so when nobody listens yet, and leaves the VM's
/// socket file alone when the vif goes.
#[test]
fn a_vm_that_listens_is_dialed_for_its_driver_domain_only() {
    let dir = Dir::new("dial");
    std::fs::create_dir_all(&dir.0).unwrap();
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut drv2 = domain(&hv, "drv2", "driver");
    let path = dir.sock("vm1");
    let spec = VhostSpec {
        dial: true,
        ..vm("vm1", &path, "drv")
    };
    hv.vhost_add(spec).unwrap();
    assert!(
        !path.exists(),
        "hv bound {} for a VM that listens",
        path.display()
    );
    // Nobody listens yet: an error the driver domain retries.
    let e = drv.vhost_dial("vm1").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    // The VMM listens (QEMU's server=on): each dial is a new connection.
    let vmm = UnixListener::bind(&path).unwrap();
    vmm.set_nonblocking(true).unwrap();
    for _ in 0..2 {
        let mut ours = UnixStream::from(drv.vhost_dial("vm1").expect("drv dials its VM"));
        let mut theirs = accept(&vmm);
        talk(&mut ours, &mut theirs);
    }
    let e = drv2.vhost_dial("vm1").unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied, "{e}");
    // Neither way of reaching a vif stands in for the other.
    let e = drv.vhost_listener("vm1").unwrap_err();
    assert!(e.to_string().contains("VhostDial"), "{e}");
    hv.vhost_add(vm("vm2", &dir.sock("vm2"), "drv")).unwrap();
    let e = drv.vhost_dial("vm2").unwrap_err();
    assert!(e.to_string().contains("VhostListener"), "{e}");
    assert!(hv.vhost_remove("vm1"));
    assert!(path.exists(), "hv removed the VM's own socket file");
    hv.shutdown();
}

/// hv dials only a socket of its own user, not a link, in a directory no
/// one else may write: otherwise someone could put a host service's
/// socket at the path and have hv hand it to the driver domain.
#[test]
fn hv_dials_no_socket_someone_else_could_have_put_there() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("dial-trust");
    std::fs::create_dir_all(&dir.0).unwrap();
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let real = dir.sock("service");
    let _service = UnixListener::bind(&real).unwrap();
    let link = dir.sock("vm1");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let spec = |name: &str, path: &Path| VhostSpec {
        dial: true,
        ..vm(name, path, "drv")
    };
    hv.vhost_add(spec("vm1", &link)).unwrap();
    let e = drv.vhost_dial("vm1").unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("not a socket"), "{e}");
    // A directory others may write.
    let open = dir.0.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = open.join("vm2.sock");
    let _vmm = UnixListener::bind(&path).unwrap();
    hv.vhost_add(spec("vm2", &path)).unwrap();
    let e = drv.vhost_dial("vm2").unwrap_err();
    assert!(e.to_string().contains("writable by others"), "{e}");
    hv.shutdown();
}
