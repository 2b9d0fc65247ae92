//! The vhost-user frontend and virtio-net driver a `nic = "virtio"` guest runs.
