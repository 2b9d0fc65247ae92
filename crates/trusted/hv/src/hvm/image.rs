//! An HVM guest's I/O path carried across an upgrade of hv, or into the hv
//! its guardian starts after a crash: its pages and doorbells by descriptor
//! number, its accounting, and (in its kept page, [`super::kept`]) the
//! relay's state.

use super::{os, Accounts, Bells, HvmConfig, HvmGuest, Shared};
use crate::error::HvResult;
use crate::proto::DomId;
use hypercall::ioreq::Placement;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use sys::{Doorbell, Memfd};

/// One HVM guest's I/O path, its descriptors by number.
#[derive(Debug, Serialize, Deserialize)]
pub struct HvmImage {
    pub domid: DomId,
    pub name: String,
    pub placement: Placement,
    pub nic_base: u16,
    pub nic_len: u16,
    pub dm_timeout_us: u64,
    pub device_model: Option<DomId>,
    /// The vcpu page, the ioreq page, the kept page.
    pub pages: [RawFd; 3],
    /// hv's ends of the doorbells, then the guest's and the device
    /// model's (guest kick, done, irq; device-model kick, done; stop).
    pub mine: [RawFd; 6],
    pub ends: [RawFd; 6],
    pub accounts: Accounts,
}

impl HvmImage {
    /// Every descriptor it names.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = self.pages.to_vec();
        v.extend(self.mine);
        v.extend(self.ends);
        v
    }
}

fn raws(b: &Bells) -> [RawFd; 6] {
    b.all().map(|d| d.as_fd().as_raw_fd())
}

impl HvmGuest {
    /// Its image, as domain `domid`'s.
    pub fn image(&self, domid: DomId) -> HvmImage {
        HvmImage {
            domid,
            name: self.name.clone(),
            placement: self.cfg.placement,
            nic_base: self.cfg.nic_base,
            nic_len: self.cfg.nic_len,
            dm_timeout_us: self.cfg.dm_timeout.as_micros() as u64,
            device_model: self.cfg.device_model,
            pages: self.pages.each_ref().map(|p| p.as_fd().as_raw_fd()),
            mine: raws(&self.mine),
            ends: raws(&self.ends),
            accounts: super::lock(&self.acc).clone(),
        }
    }

    /// The guest `image` names, its relay parked on the state an earlier
    /// program kept ([`HvmGuest::start`] runs it); `take` gives a
    /// duplicate of each descriptor the image names.
    pub fn adopt(
        image: &HvmImage,
        mut take: impl FnMut(RawFd) -> HvResult<OwnedFd>,
    ) -> HvResult<HvmGuest> {
        let cfg = HvmConfig {
            placement: image.placement,
            nic_base: image.nic_base,
            nic_len: image.nic_len,
            dm_timeout: Duration::from_micros(image.dm_timeout_us),
            device_model: image.device_model,
        };
        let mut pages = Vec::new();
        for fd in image.pages {
            pages.push(os("an HVM page", Memfd::adopt(take(fd)?))?);
        }
        let pages: [Memfd; 3] = pages.try_into().map_err(|_| unreachable_pages())?;
        let mut bells = |fds: [RawFd; 6]| -> HvResult<Bells> {
            let mut v = Vec::new();
            for fd in fds {
                v.push(Doorbell::from_fd(take(fd)?));
            }
            let all: [Doorbell; 6] = v.try_into().map_err(|_| unreachable_pages())?;
            Ok(Bells::from_all(all))
        };
        let (mine, ends) = (bells(image.mine)?, bells(image.ends)?);
        let acc: Shared = Arc::new(Mutex::new(image.accounts.clone()));
        HvmGuest::assemble(&image.name, cfg, pages, (mine, ends), acc)
    }
}

fn unreachable_pages() -> crate::error::HvError {
    crate::error::HvError::new(
        crate::error::ErrorKind::Invalid,
        "an HVM image's descriptors",
    )
}
