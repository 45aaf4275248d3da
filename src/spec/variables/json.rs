//! The declarations of a job file in HCL's JSON syntax, read as the native
//! blocks they stand for, so that its variables and locals work as a
//! native file's do.
//!
//! As HCL reads them: `"variable": {"NAME": {...}}` is one labeled block per
//! key, `"locals": {...}` and `"variables": {...}` one block each (a list of
//! objects is one block per object), `"validation"` inside a variable a
//! block, and a variable's `"type"` a string holding the type expression
//! (`"list(string)"`).

use hcl::{Block, Body, Error, Expr, Item, Span, Syntax};

/// Whether `name` is the kind of a declaration: `variable`, `variables` or
/// `locals`.
pub(super) fn is_declaration(name: &str) -> bool {
    matches!(name, "variable" | "variables" | "locals")
}

/// The declaration blocks of `body`, whichever its syntax; in JSON, a
/// property that does not have a block's shape is an error in `errors`.
pub(super) fn declaration_blocks(body: &Body, file: &str, errors: &mut Vec<Error>) -> Vec<Block> {
    if body.syntax == Syntax::Native {
        let blocks = body.blocks().filter(|b| is_declaration(&b.kind.name));
        return blocks.cloned().collect();
    }
    let mut out = Vec::new();
    for attr in body.attributes() {
        let kind = attr.key.name.as_str();
        if !is_declaration(kind) {
            continue;
        }
        let read = attr.json_blocks(kind == "variable");
        for wrong in &read.misshapen {
            errors.push(Error::new(
                file,
                wrong.pos,
                format!("\"{kind}\" in the job file {}", wrong.message),
            ));
        }
        out.extend(read.blocks.iter().cloned());
    }
    out
}

/// Takes the declarations out of `body`: its blocks, or its properties in
/// JSON.
pub(super) fn take_declarations(
    body: &mut Body,
    file: &str,
    errors: &mut Vec<Error>,
) -> Vec<Block> {
    let blocks = declaration_blocks(body, file, errors);
    // In JSON every property is read as what its name says; a native
    // attribute named `locals` is no block, and is left to the decoder.
    let json = body.syntax == Syntax::Json;
    body.items.retain(|item| match item {
        Item::Block(block) => !is_declaration(&block.kind.name),
        Item::Attribute(attr) => !(json && is_declaration(&attr.key.name)),
    });
    blocks
}

/// The `validation` blocks of a variable's JSON body.
pub(super) fn validations(attr: &hcl::Attribute) -> impl Iterator<Item = &Block> {
    attr.json_blocks(false).blocks.iter()
}

/// A variable's `type` as the expression it stands for: a JSON string
/// holds the type's text, parsed as the native syntax writes it, the
/// errors placed at the string.
pub(super) fn type_expr(expr: &Expr, file: &str) -> Result<Expr, Error> {
    let Expr::String { value, span } = expr else {
        return Ok(expr.clone());
    };
    let text = format!("t = {value}\n");
    let parsed = hcl::parse(&text, file)
        .ok()
        .and_then(|body| body.attribute("t").map(|attr| attr.value.clone()));
    let Some(parsed) = parsed else {
        return Err(Error::new(
            file,
            span.start,
            format!("invalid type {value:?}: expected string, number, bool, any, list(T), set(T), map(T), object({{...}}) or tuple([...])"),
        ));
    };
    Ok(relocate(parsed, *span))
}

/// `expr` with every position moved to `span`, where its text was in the
/// file.
fn relocate(expr: Expr, span: Span) -> Expr {
    match expr {
        Expr::Reference { root, steps, .. } => Expr::Reference {
            root: hcl::Ident { span, ..root },
            steps,
            span,
        },
        Expr::Call { name, args, .. } => Expr::Call {
            name: hcl::Ident { span, ..name },
            args: args.into_iter().map(|arg| relocate(arg, span)).collect(),
            span,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::variables::JobInputs;
    use crate::spec::Job;

    /// A JSON job whose task's args come from a list variable and a local,
    /// the variable validated.
    const JOB: &str = r#"{
  "variable": {
    "args": {
      "type": "list(string)",
      "default": ["a", "b"],
      "description": "the task's arguments",
      "validation": {
        "condition": "${length(var.args) > 0}",
        "error_message": "Give at least one argument."
      }
    },
    "name": {"type": "string", "default": "x"}
  },
  "locals": {"first": "${upper(var.args[0])}-${var.name}"},
  "job": {"app": {"group": {"g": {"task": {"t": {
    "driver": "raw_exec",
    "config": {
      "command": "/bin/echo",
      "args": "${concat([local.first], var.args)}"
    }
  }}}}}}
}"#;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The task's args the job decodes to, or its first error.
    fn args(src: &str, inputs: &JobInputs) -> String {
        match Job::decode_with(src, "job.json", inputs) {
            Ok(decoded) => {
                let task = &decoded.spec.groups[0].tasks[0];
                format!("{:?}", task.config.args)
            }
            Err(invalid) => invalid.errors[0].to_string(),
        }
    }

    #[test]
    fn json_variables_and_locals_take_their_defaults() {
        assert_eq!(args(JOB, &JobInputs::default()), r#"["A-x", "a", "b"]"#);
    }

    #[test]
    fn json_variables_take_env_then_var_files_then_flags() {
        let inputs = JobInputs {
            env: pairs(&[("name", "env"), ("args", r#"["e"]"#)]),
            var_files: pairs(&[("v.json", r#"{"name": "file"}"#)]),
            vars: pairs(&[("args", r#"["f", "g"]"#)]),
            ..JobInputs::default()
        };
        assert_eq!(args(JOB, &inputs), r#"["F-file", "f", "g"]"#);
    }

    #[test]
    fn a_failed_json_validation_names_the_variable_s_line_and_column() {
        let inputs = JobInputs {
            vars: pairs(&[("args", "[]")]),
            ..JobInputs::default()
        };
        assert_eq!(
            args(JOB, &inputs),
            "job.json:3:5: invalid value for variable \"args\": Give at least one argument."
        );
    }

    #[test]
    fn an_unknown_json_type_is_an_error_at_its_string() {
        let src = JOB.replace(r#""type": "string""#, r#""type": "text(""#);
        assert_eq!(
            args(&src, &JobInputs::default()),
            "job.json:12:22: invalid type \"text(\": expected string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])"
        );
        let src = JOB.replace(r#""type": "string""#, r#""type": "strin""#);
        assert_eq!(
            args(&src, &JobInputs::default()),
            "job.json:12:22: unknown type: expected string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])"
        );
    }

    #[test]
    fn a_json_variable_without_a_value_names_how_to_set_it() {
        let src = JOB.replace(r#", "default": "x""#, "");
        assert_eq!(
            args(&src, &JobInputs::default()),
            "job.json:12:5: variable \"name\" has no value: give it one with -var name=VALUE, in a -var-file, with NOMAD_VAR_name in the environment, or with a default"
        );
    }
}
