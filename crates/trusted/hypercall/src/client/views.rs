//! Read-only views on a peer's memory, for a backend that maps one of
//! its grants (hv checks that): the guest's whole I/O pool (the NIC's
//! view of its frames, for TX by reference) and its grant table (Xen's
//! I/O channel on TX, Menon 2006 §4.1). Each is mapped once, at connect.

use super::{io, take_fds, HvClient};
use crate::error::{err, ErrorKind, HvResult};
use crate::gnttab_view::GrantTableView;
use crate::proto::{DomId, Reply, Request};
use abi::grant::GrantEntry;
use std::os::fd::AsFd;
use sys::{Mapping, PAGE_SIZE};

impl HvClient {
    /// A read-only window on `granter`'s whole I/O pool (for a domain that
    /// maps one of its grants): mapped once, read only at frames hv holds.
    pub fn pool_window(&mut self, granter: DomId) -> HvResult<Mapping> {
        let (reply, fds) = self.chan.call(&Request::PoolWindow { granter })?;
        let Reply::PoolWindow { pool_frames } = reply else {
            return err(ErrorKind::Internal, "unexpected reply to pool_window");
        };
        let [fd] = take_fds::<1>(fds)?;
        io(
            "mapping the guest's pool read-only",
            Mapping::new(fd.as_fd(), 0, pool_frames as usize * PAGE_SIZE, false),
        )
    }

    /// A read-only view of `granter`'s grant table (for a domain that maps
    /// one of its grants): netback reads each TX grant itself, with no
    /// hypercall (Menon 2006 §4.1).
    pub fn grant_table_view(&mut self, granter: DomId) -> HvResult<GrantTableView> {
        let (reply, fds) = self.chan.call(&Request::GrantTableView { granter })?;
        let Reply::GrantTable { entries } = reply else {
            return err(ErrorKind::Internal, "unexpected reply to grant_table_view");
        };
        let [fd] = take_fds::<1>(fds)?;
        let len = entries as usize * GrantEntry::SIZE;
        let table = io(
            "mapping the guest's grant table read-only",
            Mapping::new(fd.as_fd(), 0, len.max(PAGE_SIZE), false),
        )?;
        let me = self.welcome().domid;
        Ok(GrantTableView::new(granter, me, entries, table))
    }
}
