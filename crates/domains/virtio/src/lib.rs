//! virtio-net as splitnet's second transport beside Xen's netif rings
//! (virtio 1.x §2.7 split virtqueues, §5.1 network device), carried over
//! vhost-user: the driver domain serves real VMs (QEMU, Cloud Hypervisor,
//! crosvm, DPDK's virtio_user) as a vhost-user backend, and a splitnet guest
//! with `nic = "virtio"` runs the frontend side itself.
#![forbid(unsafe_code)]

pub mod backend;
pub mod frontend;
