//! Transactions: writes that happen only if a key is as it was read
//! (its `mod_revision`), and only while every [`Condition`] of a guard
//! holds, atomically, in one etcd Txn. Of two agents that read the same
//! revision and both write, exactly one succeeds; a deposed leader's
//! guarded write fails.

use super::{Error, Etcd};
use crate::proto::etcd as pb;

/// A condition a guarded write also compares, in the same transaction:
/// the write happens only while every one holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `key` does not exist (a lost node's key is still gone).
    Absent(Vec<u8>),
    /// `key` exists (a node admitting a claim is still registered).
    Present(Vec<u8>),
    /// `key` exists on lease `lease` (a leader still holds its election
    /// with the lease it won it with).
    OnLease { key: Vec<u8>, lease: i64 },
}

impl Condition {
    fn compare(&self) -> pb::Compare {
        match self {
            Condition::Absent(key) => pb::Compare {
                result: pb::compare::CompareResult::EQUAL.into(),
                target: pb::compare::CompareTarget::VERSION.into(),
                key: key.clone(),
                target_union: Some(pb::compare::Target_union::Version(0)),
                ..Default::default()
            },
            Condition::Present(key) => pb::Compare {
                result: pb::compare::CompareResult::GREATER.into(),
                target: pb::compare::CompareTarget::VERSION.into(),
                key: key.clone(),
                target_union: Some(pb::compare::Target_union::Version(0)),
                ..Default::default()
            },
            Condition::OnLease { key, lease } => pb::Compare {
                result: pb::compare::CompareResult::EQUAL.into(),
                target: pb::compare::CompareTarget::LEASE.into(),
                key: key.clone(),
                target_union: Some(pb::compare::Target_union::Lease(*lease)),
                ..Default::default()
            },
        }
    }
}

/// The comparison "`key` last changed at `mod_revision`" (0: it does not
/// exist).
fn last_changed_at(key: &[u8], mod_revision: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::EQUAL.into(),
        target: pb::compare::CompareTarget::MOD.into(),
        key: key.to_vec(),
        target_union: Some(pb::compare::Target_union::ModRevision(mod_revision)),
        ..Default::default()
    }
}

impl Etcd {
    /// Puts `key` only if its last change is `mod_revision` (0: only if it
    /// does not exist), atomically: of two agents that read the same
    /// revision and both write, exactly one succeeds. `Ok(None)` when the
    /// key changed meanwhile (read it again); `Ok(Some(revision))` once
    /// written.
    pub fn put_if(
        &self,
        key: &[u8],
        mod_revision: i64,
        value: &[u8],
        lease: i64,
    ) -> Result<Option<i64>, Error> {
        self.put_guarded(key, mod_revision, value, lease, &[])
    }

    /// [`Etcd::put_if`], and only while every one of `guard` holds.
    pub fn put_guarded(
        &self,
        key: &[u8],
        mod_revision: i64,
        value: &[u8],
        lease: i64,
        guard: &[Condition],
    ) -> Result<Option<i64>, Error> {
        let put = pb::RequestOp {
            request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                key: key.to_vec(),
                value: value.to_vec(),
                lease,
                ..Default::default()
            })),
            ..Default::default()
        };
        let resp = self.txn(last_changed_at(key, mod_revision), guard, put)?;
        Ok(resp
            .succeeded
            .then(|| resp.header.as_ref().map_or(0, |h| h.revision)))
    }

    /// Deletes `key` only if its last change is `mod_revision`; answers
    /// whether it did.
    pub fn delete_if(&self, key: &[u8], mod_revision: i64) -> Result<bool, Error> {
        self.delete_guarded(key, mod_revision, &[])
    }

    /// [`Etcd::delete_if`], and only while every one of `guard` holds.
    pub fn delete_guarded(
        &self,
        key: &[u8],
        mod_revision: i64,
        guard: &[Condition],
    ) -> Result<bool, Error> {
        let delete = pb::RequestOp {
            request: Some(pb::request_op::Request::RequestDeleteRange(
                pb::DeleteRangeRequest {
                    key: key.to_vec(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        Ok(self
            .txn(last_changed_at(key, mod_revision), guard, delete)?
            .succeeded)
    }

    /// Whether every one of `guard` holds now.
    pub fn holds(&self, guard: &[Condition]) -> Result<bool, Error> {
        let req = pb::TxnRequest {
            compare: guard.iter().map(Condition::compare).collect(),
            ..Default::default()
        };
        Ok(self
            .call("Txn", |m, opt| m.kv.txn_opt(&req, opt))?
            .succeeded)
    }

    fn txn(
        &self,
        compare: pb::Compare,
        guard: &[Condition],
        op: pb::RequestOp,
    ) -> Result<pb::TxnResponse, Error> {
        let req = pb::TxnRequest {
            compare: std::iter::once(compare)
                .chain(guard.iter().map(Condition::compare))
                .collect(),
            success: vec![op],
            ..Default::default()
        };
        self.call("Txn", |m, opt| m.kv.txn_opt(&req, opt))
    }
}
