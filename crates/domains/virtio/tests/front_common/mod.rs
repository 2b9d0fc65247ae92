//! What the frontend's integration tests share: the frontend on a thread
//! of its own, connecting to a socket path, with its status at hand.
#![allow(dead_code)]

use serde_json::Value;
use splitnet_virtio::frontend::{self, Host, VirtioNet};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a test waits for the frontend, the backend or the kernel.
pub const WAIT: Duration = Duration::from_secs(30);

pub use testutil::wait_until;

/// The test's side of the frontend's loop: connects to the socket path,
/// publishes the status where the test reads it, stops when told.
struct PathHost {
    sock: String,
    status: Arc<Mutex<Value>>,
    stop: Arc<Mutex<bool>>,
    wake: UnixStream,
}

impl Host for PathHost {
    fn connect(&mut self) -> std::io::Result<OwnedFd> {
        UnixStream::connect(&self.sock).map(OwnedFd::from)
    }
    fn tick(&mut self, nic: &VirtioNet) -> Result<bool, String> {
        let mut b = [0u8; 64];
        let _ = std::io::Read::read(&mut &self.wake, &mut b);
        *self.status.lock().unwrap() = nic.status();
        Ok(!*self.stop.lock().unwrap())
    }
    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.as_fd())
    }
}

/// The frontend on its own thread, with a way to read its status.
pub struct Front {
    status: Arc<Mutex<Value>>,
    stop: Arc<Mutex<bool>>,
    poke: UnixStream,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Front {
    pub fn start(nic: VirtioNet, sock: &str) -> Front {
        let (poke, wake) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let status = Arc::new(Mutex::new(Value::Null));
        let stop = Arc::new(Mutex::new(false));
        let mut host = PathHost {
            sock: sock.into(),
            status: status.clone(),
            stop: stop.clone(),
            wake,
        };
        let thread = std::thread::spawn(move || {
            let mut nic = nic;
            frontend::run(&mut nic, &mut host).expect("the frontend's loop");
        });
        Front {
            status,
            stop,
            poke,
            thread: Some(thread),
        }
    }

    /// A fresh status (the loop ticks when poked).
    pub fn status(&mut self) -> Value {
        *self.status.lock().unwrap() = Value::Null;
        self.poke.write_all(b"x").unwrap();
        let mut v = Value::Null;
        wait_until("the frontend's status", WAIT, || {
            v = self.status.lock().unwrap().clone();
            !v.is_null()
        });
        v
    }

    pub fn wait_connected(&mut self, connects: u64) -> Value {
        let mut v = Value::Null;
        wait_until("the frontend to connect", WAIT, || {
            v = self.status();
            v["connected"] == true && v["connects"] == connects
        });
        v
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        *self.stop.lock().unwrap() = true;
        let _ = self.poke.write_all(b"x");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn counter(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// A virtio NIC on a new TAP `name` (prefixed with the process id's last
/// digits, so tests in parallel do not collide), up when `up` (a TAP that
/// is down refuses frames written into it). Returns it and the TAP's name.
pub fn nic_on_tap(prefix: &str, up: bool) -> (VirtioNet, String) {
    let name = format!("{prefix}{}", std::process::id() % 100_000);
    let tap = sys::Tap::create(&name, true).unwrap();
    if up {
        let ok = std::process::Command::new("ip")
            .args(["link", "set", &name, "up"])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    (VirtioNet::new(tap).unwrap(), name)
}
