//! HCL2 expressions through `job run`: `for` expressions, splats and the
//! regex and network functions evaluated with the job's variables and
//! locals, and what they leave for the agent interpolated when the task
//! starts; and a template's regex functions.

use super::templates::wait_for_log;
use super::Rig;
use crate::harness::text;
use crate::util::require_root;

/// A raw_exec job whose environment is made by fors, splats and regexes
/// over a list of objects, and prints it.
const JOB: &str = r#"variable "disks" {
  type = list(object({ id = string, size = number }))
  default = [
    { id = "vol-a1", size = 10 },
    { id = "vol-b2", size = 20 },
    { id = "tmp-c3", size = 5 },
  ]
}

locals {
  ids    = var.disks[*].id
  big    = [for d in var.disks : upper(d.id) if d.size >= 10]
  sizes  = {for d in var.disks : regex("^[a-z]+", d.id) => d.size...}
  parts  = regex("-(?P<letter>[a-z])(?P<digit>\\d)$", var.disks[0].id)
  tagged = join(",", [for i, id in local.ids : "${i}:${id}@${NOMAD_ALLOC_INDEX}"])
}

job "exprs" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      env {
        IDS    = join(" ", local.ids)
        BIG    = join(" ", local.big)
        SIZES  = jsonencode(local.sizes)
        PARTS  = "${local.parts.letter}${local.parts.digit}"
        TAGGED = local.tagged
        NET    = cidrsubnet("10.0.0.0/16", 8, 2)
        ALL    = join(",", var.disks.*.size)
        FIXED  = regex_replace("a-b-c", "-(\\w)", "_$1")
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$IDS|$BIG|$SIZES|$PARTS|$TAGGED|$NET|$ALL|$FIXED\"; exec sleep 600"]
      }
    }
  }
}
"#;

/// Runs job `name` from `hcl`, which must be accepted; its one alloc,
/// once its task runs.
#[track_caller]
fn run_one(rig: &Rig, name: &str, hcl: &str) -> String {
    let out = rig.run_job_output(&format!("{name}.hcl"), hcl);
    assert!(out.status.success(), "{}", text(&out));
    let alloc = rig.job(name).allocs[0].id.clone();
    rig.wait_running(name, &alloc);
    alloc
}

#[test]
fn fors_splats_and_regexes_make_a_task_s_environment() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = run_one(&rig, "exprs", JOB);
    let want = "vol-a1 vol-b2 tmp-c3|VOL-A1 VOL-B2|{\"tmp\":[5],\"vol\":[10,20]}|a1\
                |0:vol-a1@0,1:vol-b2@0,2:tmp-c3@0|10.0.2.0/24|10,20,5|a_b_c\n";
    wait_for_log(&rig, &alloc, want);
    rig.stop("exprs");
}

#[test]
fn a_for_over_a_string_is_refused_at_its_position() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let job = JOB.replace("[for d in var.disks :", "[for d in \"disks\" :");
    let out = rig.run_job_output("bad.hcl", &job);
    assert!(!out.status.success());
    let err = text(&out);
    assert!(
        err.contains("bad.hcl:12:22: a for expression iterates over a list, a set, a map or an object, not a string"),
        "{err}"
    );
}

/// A raw_exec task whose environment a template makes with consul-template's
/// regex functions.
const REGEX_TEMPLATE: &str = r#"job "retpl" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      template {
        data        = <<-EOT
          ID={{ env "NOMAD_ALLOC_ID" | regexReplaceAll "^(?P<head>....)(.*)$" "$${head}-$2" }}
          HEX={{ if env "NOMAD_ALLOC_ID" | regexMatch "^[0-9a-f]{8}$" }}yes{{ else }}no{{ end }}
          DOTS={{ "a.b.c" | regexReplaceAll "\\." "_" }}
        EOT
        destination = "local/re.env"
        env         = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$ID|$HEX|$DOTS\"; exec sleep 600"]
      }
    }
  }
}
"#;

#[test]
fn a_template_s_regex_functions_match_and_replace_as_go_does() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = run_one(&rig, "retpl", REGEX_TEMPLATE);
    let want = format!("{}-{}|yes|a_b_c\n", &alloc[..4], &alloc[4..]);
    wait_for_log(&rig, &alloc, &want);
    rig.stop("retpl");
}

/// A raw_exec job whose environment and arguments are built by `%{ }`
/// directives over a variable list, one of them on a name known only when
/// the task starts.
const DIRECTIVES_JOB: &str = r#"variable "hosts" {
  type    = list(string)
  default = ["a", "b", "c"]
}

variable "debug" {
  type    = bool
  default = true
}

job "directives" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      env {
        HOSTS = "%{ for i, h in var.hosts }%{ if i > 0 },%{ endif }${h}:80%{ endfor }"
        MODE  = <<-EOT
          %{~ if var.debug ~}
          debug
          %{~ else ~}
          quiet
          %{~ endif ~}
        EOT
        INDEX = "${NOMAD_ALLOC_INDEX}"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$HOSTS|$MODE|$INDEX|%{ for h in var.hosts }${upper(h)}%{ endfor }\"; exec sleep 600"]
      }
    }
  }
}
"#;

#[test]
fn template_directives_build_a_task_s_environment_and_args() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = run_one(&rig, "directives", DIRECTIVES_JOB);
    wait_for_log(&rig, &alloc, "a:80,b:80,c:80|debug|0|ABC\n");
    rig.stop("directives");
}

/// A raw_exec job whose templates and environment come from `dynamic`
/// blocks over a variable map, one of them nested in the other's content.
const DYNAMIC_JOB: &str = r#"variable "settings" {
  type    = map(string)
  default = { port = "8080", mode = "fast" }
}

job "dynamic" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      dynamic "template" {
        for_each = var.settings
        iterator = s
        content {
          data        = "${upper(s.key)}=${s.value}\n"
          destination = "local/${s.key}.env"
          env         = true
        }
      }
      dynamic "env" {
        for_each = [keys(var.settings)]
        content {
          KEYS = join(",", env.value)
          DIR  = "${NOMAD_TASK_DIR}"
        }
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$MODE|$PORT|$KEYS|$(basename $DIR)\"; exec sleep 600"]
      }
    }
  }
}
"#;

#[test]
fn dynamic_blocks_make_a_task_s_templates_and_environment() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let alloc = run_one(&rig, "dynamic", DYNAMIC_JOB);
    wait_for_log(&rig, &alloc, "fast|8080|mode,port|local\n");
    rig.stop("dynamic");
}
