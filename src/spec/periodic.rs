//! A job's `periodic` and `parameterized` blocks: jobs that do not run
//! themselves but launch children, on a schedule (`periodic`) or when
//! dispatched (`parameterized`, `job dispatch`).
//!
//! As in Nomad, both are for `batch` and `sysbatch` jobs. A job that is
//! both (Nomad dispatches a periodic child of it) is refused here: the
//! agent runs one kind of parent or the other. Cron expressions are in
//! `cron.rs`; they are evaluated in the local time of `time_zone` (UTC
//! unless given), read from the host's zone files (`zone.rs`) when the job
//! is decoded.

use super::cron::CronExpr;
use super::decode::Fields;
use super::encode::Writer;
use super::job_type::JobType;
use super::keywords;

/// `periodic { cron crons prohibit_overlap time_zone enabled }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Periodic {
    /// `cron`, or the `crons` list: a launch is due at the earliest time
    /// any of them matches.
    pub crons: Vec<CronExpr>,
    /// A launch is skipped while an earlier child still runs.
    pub prohibit_overlap: bool,
    /// When false, the job is kept but nothing is launched on schedule.
    pub enabled: bool,
    /// As written; `UTC` unless given.
    pub time_zone: String,
    /// The zone's offsets, read when the job was decoded.
    pub zone: super::zone::Zone,
}

impl Periodic {
    /// The first launch after `after` (seconds since the epoch), `None`
    /// when no expression matches within the search's bound.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        self.crons
            .iter()
            .filter_map(|c| c.next_after_in(after, &self.zone))
            .min()
    }
}

keywords! {
    /// Whether a dispatch gives the child a payload.
    pub enum PayloadRule ("payload") {
        /// A payload may be given.
        Optional = "optional",
        /// A payload must be given.
        Required = "required",
        /// No payload may be given.
        Forbidden = "forbidden",
    }
}

/// `parameterized { payload meta_required meta_optional }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameterized {
    pub payload: PayloadRule,
    /// Meta keys every dispatch must give.
    pub meta_required: Vec<String>,
    /// Meta keys a dispatch may give; no others are allowed.
    pub meta_optional: Vec<String>,
}

/// Decodes the job block's `periodic` and `parameterized` blocks and
/// checks them against the job's type.
pub(crate) fn decode_schedule(
    j: &mut Fields<'_>,
    job_type: JobType,
) -> (Option<Box<Periodic>>, Option<Parameterized>) {
    let periodic_block = j.block("periodic");
    let periodic = periodic_block.map(|block| Box::new(decode_periodic(&mut j.nested(block))));
    let parameterized_block = j.block("parameterized");
    let parameterized = parameterized_block.map(|block| decode_parameterized(&mut j.nested(block)));
    for (block, kind) in [
        (periodic_block, "periodic"),
        (parameterized_block, "parameterized"),
    ] {
        if let (Some(block), false) = (block, job_type.runs_to_completion()) {
            j.error(
                block.kind.span.start,
                format!(
                    "{kind} in {} needs a batch or sysbatch job, not {job_type}",
                    j.what()
                ),
            );
        }
    }
    if let (Some(_), Some(block)) = (periodic_block, parameterized_block) {
        j.error(
            block.kind.span.start,
            format!(
                "{} is both periodic and parameterized: csi-agent runs one or the other (Nomad would launch a parameterized child on the schedule)",
                j.what()
            ),
        );
    }
    (periodic, parameterized)
}

fn decode_periodic(f: &mut Fields<'_>) -> Periodic {
    let mut texts: Vec<(String, hcl::Pos)> = Vec::new();
    let cron = f.string_at("cron");
    let crons = f.strings_at("crons");
    match (cron, crons) {
        (Some(_), Some(_)) => f.error(
            f.pos(),
            format!(
                "{} has both cron and crons: give one expression in cron, or a list in crons",
                f.what()
            ),
        ),
        (Some(one), None) => texts.push(one),
        (None, Some(list)) => texts = list,
        (None, None) => f.missing("cron"),
    }
    if texts.is_empty() && f.has("crons") {
        f.error(f.pos(), format!("crons in {} is empty", f.what()));
    }
    let mut crons = Vec::new();
    for (text, pos) in texts {
        match CronExpr::parse(&text) {
            Ok(expr) => crons.push(expr),
            Err(err) => f.error(pos, format!("{}: {err}", f.what())),
        }
    }
    let (time_zone, zone) = match f.string_at("time_zone") {
        Some((name, pos)) => match super::zone::Zone::load(&name) {
            Ok(zone) => (name, zone),
            Err(err) => {
                f.error(pos, format!("{err} in {}", f.what()));
                (name, super::zone::Zone::utc())
            }
        },
        None => ("UTC".to_string(), super::zone::Zone::utc()),
    };
    let periodic = Periodic {
        crons,
        prohibit_overlap: f.bool("prohibit_overlap").unwrap_or(false),
        enabled: f.bool("enabled").unwrap_or(true),
        time_zone,
        zone,
    };
    f.finish();
    periodic
}

fn decode_parameterized(f: &mut Fields<'_>) -> Parameterized {
    let payload = f.parsed("payload").unwrap_or(PayloadRule::Optional);
    let meta_required = f.strings("meta_required").unwrap_or_default();
    let meta_optional = f.strings("meta_optional").unwrap_or_default();
    if let Some(both) = meta_required.iter().find(|k| meta_optional.contains(k)) {
        f.error(
            f.pos(),
            format!(
                "meta key {both:?} in {} is both required and optional",
                f.what()
            ),
        );
    }
    f.finish();
    Parameterized {
        payload,
        meta_required,
        meta_optional,
    }
}

/// Writes the blocks back as HCL that decodes to them.
pub(crate) fn write_schedule(
    w: &mut Writer,
    periodic: Option<&Periodic>,
    parameterized: Option<&Parameterized>,
) {
    if let Some(p) = periodic {
        w.open("periodic", None);
        let crons: Vec<String> = p.crons.iter().map(|c| c.as_str().to_string()).collect();
        w.strings("crons", &crons);
        w.plain("prohibit_overlap", p.prohibit_overlap);
        w.plain("enabled", p.enabled);
        w.string("time_zone", &p.time_zone);
        w.close();
    }
    if let Some(p) = parameterized {
        w.open("parameterized", None);
        w.string("payload", p.payload.as_str());
        w.strings("meta_required", &p.meta_required);
        w.strings("meta_optional", &p.meta_optional);
        w.close();
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::Job;

    fn job(job_type: &str, blocks: &str, task_extra: &str) -> String {
        format!(
            r#"job "j" {{
  type = "{job_type}"
{blocks}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{ command = "/bin/true" }}
{task_extra}
    }}
  }}
}}
"#
        )
    }

    fn refused(text: &str) -> String {
        Job::decode(text, "j.hcl").unwrap_err().to_string()
    }

    #[test]
    fn periodic_blocks_decode_cron_or_crons() {
        let one = Job::decode(&job("batch", "periodic { cron = \"@daily\" }", ""), "j.hcl")
            .unwrap()
            .spec;
        let periodic = one.periodic.unwrap();
        assert_eq!(periodic.crons.len(), 1);
        assert!(periodic.enabled && !periodic.prohibit_overlap);
        assert_eq!(periodic.time_zone, "UTC");
        let two = Job::decode(
            &job(
                "sysbatch",
                "periodic {\n crons = [\"0 3 * * *\", \"30 1 * * *\"]\n time_zone = \"Etc/UTC\"\n enabled = false\n}",
                "",
            ),
            "j.hcl",
        )
        .unwrap()
        .spec;
        let periodic = two.periodic.unwrap();
        // 01:30 comes before 03:00.
        assert_eq!(periodic.next_after(0), Some(5400));
        assert!(!periodic.enabled);
        let berlin = Job::decode(
            &job(
                "batch",
                "periodic {\n cron = \"0 3 * * *\"\n time_zone = \"Europe/Berlin\"\n}",
                "",
            ),
            "j.hcl",
        )
        .unwrap()
        .spec
        .periodic
        .unwrap();
        // 03:00 in Berlin on 1970-01-01 was 02:00Z.
        assert_eq!(berlin.next_after(0), Some(7200));
    }

    #[test]
    fn a_periodic_job_written_back_decodes_the_same() {
        let text = job(
            "batch",
            "periodic {\n crons = [\"*/5 * * * *\"]\n prohibit_overlap = true\n}\nparameterized {}",
            "dispatch_payload { file = \"in/x\" }",
        );
        // Both blocks are refused together; each alone round-trips.
        assert!(refused(&text).contains("both periodic and parameterized"));
        for blocks in [
            "periodic {\n crons = [\"*/5 * * * *\"]\n prohibit_overlap = true\n}",
            "parameterized {\n payload = \"required\"\n meta_required = [\"a\"]\n}",
        ] {
            let spec = Job::decode(
                &job("batch", blocks, "dispatch_payload { file = \"in/x\" }"),
                "j.hcl",
            )
            .unwrap()
            .spec;
            let again = Job::decode(&spec.to_hcl(), "again.hcl").unwrap().spec;
            assert_eq!(again.periodic, spec.periodic);
            assert_eq!(again.parameterized, spec.parameterized);
            assert_eq!(
                again.groups[0].tasks[0].dispatch_payload.as_deref(),
                Some("in/x")
            );
        }
    }

    #[test]
    fn what_nomad_or_this_agent_cannot_run_is_refused_by_name() {
        assert!(
            refused(&job("service", "periodic { cron = \"@daily\" }", ""))
                .contains("periodic in job \"j\" needs a batch or sysbatch job, not service")
        );
        assert!(refused(&job("service", "parameterized {}", ""))
            .contains("parameterized in job \"j\" needs a batch or sysbatch job"));
        assert!(refused(&job(
            "batch",
            "periodic { time_zone = \"Mars/Olympus\"\n cron = \"@daily\" }",
            ""
        ))
        .contains("time zone \"Mars/Olympus\": cannot read /usr/share/zoneinfo/Mars/Olympus"));
        assert!(refused(&job(
            "batch",
            "periodic {\n cron = \"@daily\"\n crons = [\"@daily\"]\n}",
            ""
        ))
        .contains("has both cron and crons"));
        assert!(
            refused(&job("batch", "periodic { cron = \"61 * * * *\" }", ""))
                .contains("minute field: \"61\"")
        );
        assert!(refused(&job("batch", "periodic { enabled = true }", "")).contains("cron"));
        assert!(refused(&job(
            "batch",
            "parameterized {\n meta_required = [\"a\"]\n meta_optional = [\"a\"]\n}",
            ""
        ))
        .contains("meta key \"a\""));
        assert!(
            refused(&job("batch", "parameterized { payload = \"maybe\" }", "")).contains("payload")
        );
        for file in ["../x", "/etc/x", ""] {
            let text = job(
                "batch",
                "parameterized {}",
                &format!("dispatch_payload {{ file = \"{file}\" }}"),
            );
            assert!(
                refused(&text).contains("inside the task's local/ dir"),
                "{file}"
            );
        }
    }
}
