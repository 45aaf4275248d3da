//! `job plan`'s answer as its protobuf message: `wire.rs`'s part for the
//! plan, in a file of its own.

use protobuf::MessageField;

use crate::proto::agent as pb;
use crate::spec::diff::{FieldDiff, ObjectDiff};
use crate::task::calls::JobPlanned;

pub fn job_planned(plan: JobPlanned) -> pb::JobPlanResponse {
    pb::JobPlanResponse {
        job: plan.job,
        diff: MessageField::some(diff(plan.diff)),
        unplaced: plan
            .unplaced
            .iter()
            .map(super::wire_jobs::unplaced)
            .collect(),
        job_modify_index: plan.modify_index,
        warnings: plan.warnings,
        next_periodic_launch_unix: plan.next_launch.unwrap_or(0),
        ..Default::default()
    }
}

fn diff(d: ObjectDiff) -> pb::PlanDiff {
    pb::PlanDiff {
        type_: d.kind.as_str().to_string(),
        name: d.name,
        fields: d.fields.into_iter().map(field).collect(),
        objects: d.objects.into_iter().map(diff).collect(),
        children: d.children.into_iter().map(diff).collect(),
        annotations: d.annotations,
        updates: d
            .updates
            .into_iter()
            .map(|(kind, count)| pb::PlanUpdate {
                kind,
                count,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn field(f: FieldDiff) -> pb::PlanField {
    pb::PlanField {
        type_: f.kind.as_str().to_string(),
        name: f.name,
        old: f.old,
        new: f.new,
        annotations: f.annotations,
        ..Default::default()
    }
}
