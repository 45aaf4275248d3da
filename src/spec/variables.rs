//! HCL2 input variables and locals of job files, and the values a caller
//! gives them.
//!
//! A job file declares `variable "name" { type, default, description,
//! validation }` blocks (or a `variables { name = default }` block) and
//! `locals { ... }`; the caller gives values with `-var name=value`,
//! `-var-file FILE` and `NOMAD_VAR_<name>` in its environment. As in Nomad
//! (`jobspec2`), a later source wins: the default, then the environment,
//! then the var files in the order given, then the `-var` flags in the
//! order given. The values travel with the job ([`JobInputs`]) so that the
//! agent, which decodes a job again from its text when it restarts, always
//! decodes the same job. The variables and locals are taken out of the
//! body, and every expression left is evaluated ([`hcl::evaluate`]), so
//! that the decoders only see literals.

use std::collections::BTreeMap;

use hcl::{Block, Body, Error, Expr, FileSource, Item, Pos, Scope, Step, Syntax, Value};

mod json;

use super::Warning;

/// What a caller gives a job file's variables, as it gave them, kept with
/// the job so that decoding it again gives the same job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobInputs {
    /// `NOMAD_VAR_<name>` of the caller's environment: name (without the
    /// prefix) and value.
    pub env: Vec<(String, String)>,
    /// The `-var-file` files in the order given: name and text (HCL, or
    /// HCL's JSON syntax for a name ending in `.json`).
    pub var_files: Vec<(String, String)>,
    /// The `-var name=value` flags in the order given.
    pub vars: Vec<(String, String)>,
    /// The files the job's `file()` calls read.
    pub files: FileSource,
    /// Whether a value for a variable the job file does not declare (from
    /// `-var` or a var file) is an error rather than a warning: the CLI's
    /// default, as Nomad's `-hcl2-strict`. Not sent to the agent, which
    /// warns: the CLI has already refused what it was told to.
    pub strict: bool,
}

impl JobInputs {
    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.var_files.is_empty()
            && self.vars.is_empty()
            && self.files.given.is_empty()
            && self.files.read.borrow().is_empty()
    }

    /// Drops the `NOMAD_VAR_` values for which the job file `src` declares
    /// no variable: the caller's environment may hold values for other
    /// jobs, and those are neither sent nor kept with this one.
    pub fn keep_declared_env(&mut self, src: &str, file: &str) {
        let Ok(body) = hcl::parse_file(src, file) else {
            self.env.clear();
            return;
        };
        let declared = declared_names(&body);
        self.env.retain(|(name, _)| declared.contains(name));
    }

    /// The values given by `-var` and the var files for variables that the
    /// job file `src` does not declare, each an error at where it was
    /// given; none if `src` does not parse (its decoding says why).
    pub fn undeclared(&self, src: &str, file: &str) -> Vec<Error> {
        let Ok(body) = hcl::parse_file(src, file) else {
            return Vec::new();
        };
        let found = self.undeclared_of(&declared_names(&body), file);
        found.into_iter().map(strict_error).collect()
    }

    /// [`JobInputs::undeclared`] against the names `declared`.
    fn undeclared_of(&self, declared: &[String], file: &str) -> Vec<Error> {
        let mut out = Vec::new();
        for (var_file, text) in &self.var_files {
            let Ok(body) = hcl::parse_file(text, var_file) else {
                continue;
            };
            for attr in body.attributes() {
                let name = &attr.key.name;
                if !declared.contains(name) {
                    out.push(Error::new(
                        var_file,
                        attr.key.span.start,
                        format!("{name:?} is not a variable of the job file"),
                    ));
                }
            }
        }
        for (name, _) in &self.vars {
            if !declared.contains(name) {
                out.push(Error::new(
                    file,
                    Pos::new(1, 1),
                    format!("-var {name}: the job file declares no variable {name:?}"),
                ));
            }
        }
        out
    }

    /// The files that `file()` calls read so far, given or from disk.
    pub fn files_read(&self) -> BTreeMap<String, String> {
        let mut all = self.files.given.clone();
        all.extend(self.files.read.borrow().clone());
        all
    }
}

/// A variable's type, as Nomad writes it: `string`, `number`, `bool`,
/// `any`, `list(T)`, `set(T)`, `map(T)`; `object(...)` and `tuple(...)`
/// are taken as `any`.
#[derive(Debug, Clone, PartialEq)]
enum VarType {
    Any,
    String,
    Number,
    Bool,
    List(Box<VarType>),
    Map(Box<VarType>),
}

/// A declared variable.
struct Variable<'a> {
    name: String,
    pos: Pos,
    ty: VarType,
    /// The value and where it came from, the last source that set it.
    value: Option<Value>,
    validations: Vec<&'a Block>,
}

/// Takes the variables and locals out of a job file's body and evaluates
/// its expressions with them. Warnings (values for undeclared variables)
/// go to `warnings`.
pub(crate) fn resolve(
    body: &mut Body,
    file: &str,
    inputs: &JobInputs,
    warnings: &mut Vec<Warning>,
) -> Result<(), Vec<Error>> {
    let mut errors = Vec::new();
    let declarations = json::take_declarations(body, file, &mut errors);
    let base = Scope::with_files(&inputs.files);
    let mut variables = Vec::new();
    let mut locals = Vec::new();
    for block in &declarations {
        let result = match block.kind.name.as_str() {
            "variable" => declare(block, file, &base).map(|v| variables.push(v)),
            "variables" => block.body.attributes().try_for_each(|attr| {
                let value = hcl::eval(&attr.value, &base, file)?;
                variables.push(Variable {
                    name: attr.key.name.clone(),
                    pos: attr.key.span.start,
                    ty: VarType::Any,
                    value: Some(value),
                    validations: Vec::new(),
                });
                Ok(())
            }),
            _ => plain_attributes(block, file).map(|()| locals.extend(block.body.attributes())),
        };
        if let Err(err) = result {
            errors.push(err);
        }
    }
    for (i, v) in variables.iter().enumerate() {
        if let Some(first) = variables[..i].iter().find(|w| w.name == v.name) {
            errors.push(Error::new(
                file,
                v.pos,
                format!("variable {:?} is already declared at {}", v.name, first.pos),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    assign(&mut variables, file, inputs, &base, warnings, &mut errors);
    let mut scope = Scope::with_files(&inputs.files);
    scope.declares = true;
    for v in &variables {
        match &v.value {
            Some(value) => {
                scope.vars.insert(v.name.clone(), value.clone());
            }
            None => errors.push(Error::new(
                file,
                v.pos,
                format!(
                    "variable {0:?} has no value: give it one with -var {0}=VALUE, in a -var-file, with NOMAD_VAR_{0} in the environment, or with a default",
                    v.name
                ),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for v in &variables {
        if let Err(err) = validate(v, file, &scope) {
            errors.push(err);
        }
    }
    if let Err(err) = evaluate_locals(&locals, file, &mut scope) {
        errors.push(err);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    hcl::evaluate(body, &scope, file)
}

/// Evaluates the expressions of a file that declares no variables (agent
/// configs, volume specs): functions, but no `var.*` or `local.*`.
pub(crate) fn evaluate_plain(body: &mut Body, file: &str) -> Result<(), Vec<Error>> {
    hcl::evaluate(body, &Scope::default(), file)
}

/// A value for an undeclared variable as the error it is under
/// `-hcl2-strict`.
fn strict_error(err: Error) -> Error {
    Error {
        message: format!("{} (with -hcl2-strict=false it is a warning)", err.message),
        ..err
    }
}

/// The variables a job file's body declares, in `variable` and
/// `variables` blocks.
fn declared_names(body: &Body) -> Vec<String> {
    json::declaration_blocks(body, "", &mut Vec::new())
        .iter()
        .flat_map(|block| match block.kind.name.as_str() {
            "variable" => block.label(0).map(str::to_string).into_iter().collect(),
            "variables" => block
                .body
                .attributes()
                .map(|a| a.key.name.clone())
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// Refuses blocks inside a block that only holds attributes.
fn plain_attributes(block: &Block, file: &str) -> Result<(), Error> {
    match block.body.blocks().next() {
        Some(inner) => Err(Error::new(
            file,
            inner.kind.span.start,
            format!("{} holds only attributes, not blocks", block.kind.name),
        )),
        None => Ok(()),
    }
}

/// Reads a `variable "name" { ... }` block.
fn declare<'a>(block: &'a Block, file: &str, base: &Scope<'_>) -> Result<Variable<'a>, Error> {
    let Some(name) = block.label(0) else {
        return Err(Error::new(
            file,
            block.kind.span.start,
            "a variable block needs a name: variable \"NAME\" { ... }",
        ));
    };
    let mut v = Variable {
        name: name.to_string(),
        pos: block.labels[0].span.start,
        ty: VarType::Any,
        value: None,
        validations: Vec::new(),
    };
    if let Some(attr) = block.body.attribute("type") {
        v.ty = match block.body.syntax {
            Syntax::Native => var_type(&attr.value, file)?,
            Syntax::Json => var_type(&json::type_expr(&attr.value, file)?, file)?,
        };
    }
    for item in &block.body.items {
        match item {
            Item::Attribute(attr) => match attr.key.name.as_str() {
                "type" | "sensitive" | "nullable" => {}
                "validation" if block.body.syntax == Syntax::Json => {
                    v.validations.extend(json::validations(attr));
                }
                "description" => {
                    hcl::eval(&attr.value, base, file)?;
                }
                "default" => {
                    let value = hcl::eval(&attr.value, base, file)?;
                    let value = convert(value, &v.ty).map_err(|err| {
                        Error::new(file, attr.value.pos(), format!("the default of variable {name:?} {err}"))
                    })?;
                    v.value = Some(value);
                }
                other => {
                    return Err(Error::new(
                        file,
                        attr.key.span.start,
                        format!("unknown attribute {other:?} in variable {name:?} (a variable has type, default, description and validation)"),
                    ))
                }
            },
            Item::Block(inner) if inner.kind.name == "validation" => v.validations.push(inner),
            Item::Block(inner) => {
                return Err(Error::new(
                    file,
                    inner.kind.span.start,
                    format!("unknown block {:?} in variable {name:?}", inner.kind.name),
                ))
            }
        }
    }
    Ok(v)
}

/// Reads a type as Nomad writes it, without evaluating it.
fn var_type(expr: &Expr, file: &str) -> Result<VarType, Error> {
    let unknown = || {
        Error::new(
            file,
            expr.pos(),
            "unknown type: expected string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])",
        )
    };
    match expr {
        Expr::Reference { root, steps, .. } if steps.is_empty() => match root.name.as_str() {
            "string" => Ok(VarType::String),
            "number" => Ok(VarType::Number),
            "bool" => Ok(VarType::Bool),
            "any" => Ok(VarType::Any),
            _ => Err(unknown()),
        },
        Expr::Call { name, args, .. } => match (name.name.as_str(), args.as_slice()) {
            ("list" | "set", [inner]) => Ok(VarType::List(Box::new(var_type(inner, file)?))),
            ("map", [inner]) => Ok(VarType::Map(Box::new(var_type(inner, file)?))),
            ("object" | "tuple", [_]) => Ok(VarType::Any),
            _ => Err(unknown()),
        },
        _ => Err(unknown()),
    }
}

/// Converts `value` to `ty` as HCL does for a variable: numbers and bools
/// to strings and back.
fn convert(value: Value, ty: &VarType) -> Result<Value, String> {
    let wrong = |value: &Value, wanted: &str| {
        Err(format!("must be a {wanted}, not a {}", value.kind_name()))
    };
    match (ty, value) {
        (VarType::Any, value) => Ok(value),
        (_, Value::Null) => Ok(Value::Null),
        (VarType::String, value) => match value.as_text() {
            Some(text) => Ok(Value::String(text)),
            None => wrong(&value, "string"),
        },
        (VarType::Number, Value::Number(n)) => Ok(Value::Number(n)),
        (VarType::Number, Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Value::number(n)),
            _ => Err(format!("must be a number, not {s:?}")),
        },
        (VarType::Bool, Value::Bool(b)) => Ok(Value::Bool(b)),
        (VarType::Bool, Value::String(s)) if s == "true" || s == "false" => {
            Ok(Value::Bool(s == "true"))
        }
        (VarType::List(inner), Value::List(items)) => items
            .into_iter()
            .map(|item| convert(item, inner))
            .collect::<Result<_, _>>()
            .map(Value::List),
        (VarType::Map(inner), Value::Object(entries)) => entries
            .into_iter()
            .map(|(k, v)| Ok((k, convert(v, inner)?)))
            .collect::<Result<_, String>>()
            .map(Value::Object),
        (VarType::Number, value) => wrong(&value, "number"),
        (VarType::Bool, value) => wrong(&value, "bool"),
        (VarType::List(_), value) => wrong(&value, "list"),
        (VarType::Map(_), value) => wrong(&value, "map"),
    }
}

/// The value of a `-var` flag or a `NOMAD_VAR_` variable: the text itself
/// for a variable of a primitive type (or untyped), converted to it; read
/// as an HCL expression for a list or a map, as Nomad does.
fn raw_value(raw: &str, ty: &VarType, origin: &str, base: &Scope<'_>) -> Result<Value, String> {
    let value = match ty {
        VarType::Any | VarType::String | VarType::Number | VarType::Bool => {
            Value::String(raw.to_string())
        }
        _ => {
            let text = format!("value = {raw}\n");
            let body = hcl::parse(&text, origin).map_err(|err| err.message)?;
            let expr = &body.attribute("value").ok_or("no value")?.value;
            hcl::eval(expr, base, origin).map_err(|err| err.message)?
        }
    };
    convert(value, ty)
}

/// Gives the variables their values from the inputs, later sources over
/// earlier ones: environment, var files, flags.
fn assign(
    variables: &mut [Variable<'_>],
    file: &str,
    inputs: &JobInputs,
    base: &Scope<'_>,
    warnings: &mut Vec<Warning>,
    errors: &mut Vec<Error>,
) {
    let declared: Vec<String> = variables.iter().map(|v| v.name.clone()).collect();
    for undeclared in inputs.undeclared_of(&declared, file) {
        if inputs.strict {
            errors.push(strict_error(undeclared));
        } else {
            warnings.push(Warning {
                file: undeclared.file,
                pos: undeclared.pos,
                message: undeclared.message,
            });
        }
    }
    for (name, raw) in &inputs.env {
        // As in Nomad, the environment may hold values for other jobs.
        let Some(v) = variables.iter_mut().find(|v| v.name == *name) else {
            continue;
        };
        match raw_value(raw, &v.ty, &format!("NOMAD_VAR_{name}"), base) {
            Ok(value) => v.value = Some(value),
            Err(err) => errors.push(Error::new(
                file,
                v.pos,
                format!("variable {name:?}: NOMAD_VAR_{name} {err}"),
            )),
        }
    }
    for (var_file, text) in &inputs.var_files {
        let body = match hcl::parse_file(text, var_file) {
            Ok(body) => body,
            Err(err) => {
                errors.push(err);
                continue;
            }
        };
        if let Some(block) = body.blocks().next() {
            errors.push(Error::new(
                var_file,
                block.kind.span.start,
                format!(
                    "a var file gives values (name = value), it does not declare {:?} blocks: declare variables in the job file",
                    block.kind.name
                ),
            ));
            continue;
        }
        for attr in body.attributes() {
            let name = &attr.key.name;
            let Some(v) = variables.iter_mut().find(|v| v.name == *name) else {
                continue;
            };
            let value = hcl::eval(&attr.value, base, var_file).and_then(|value| {
                convert(value, &v.ty).map_err(|err| {
                    Error::new(
                        var_file,
                        attr.value.pos(),
                        format!("variable {name:?} {err}"),
                    )
                })
            });
            match value {
                Ok(value) => v.value = Some(value),
                Err(err) => errors.push(err),
            }
        }
    }
    for (name, raw) in &inputs.vars {
        let Some(v) = variables.iter_mut().find(|v| v.name == *name) else {
            continue;
        };
        match raw_value(raw, &v.ty, &format!("-var {name}"), base) {
            Ok(value) => v.value = Some(value),
            Err(err) => errors.push(Error::new(
                file,
                v.pos,
                format!("variable {name:?}: -var {name} {err}"),
            )),
        }
    }
}

/// Checks a variable's `validation` blocks: `condition` must be true, or
/// the error is `error_message`. Conditions are expressions like any
/// other: functions, operators and `? :`.
fn validate(v: &Variable<'_>, file: &str, scope: &Scope<'_>) -> Result<(), Error> {
    for block in &v.validations {
        plain_attributes(block, file)?;
        let attr = |key: &str| {
            block.body.attribute(key).ok_or_else(|| {
                Error::new(
                    file,
                    block.kind.span.start,
                    format!("a validation block of variable {:?} needs {key}", v.name),
                )
            })
        };
        let condition = attr("condition")?;
        let message = hcl::eval(&attr("error_message")?.value, scope, file)?;
        match hcl::eval(&condition.value, scope, file)? {
            Value::Bool(true) => {}
            Value::Bool(false) => {
                return Err(Error::new(
                    file,
                    v.pos,
                    format!(
                        "invalid value for variable {:?}: {}",
                        v.name,
                        message.as_text().unwrap_or_default()
                    ),
                ))
            }
            other => {
                return Err(Error::new(
                    file,
                    condition.value.pos(),
                    format!(
                        "a validation condition must be a bool, not a {}",
                        other.kind_name()
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Evaluates the locals, each after the locals it refers to (a walk of
/// their dependencies in time linear in their number, with its own stack:
/// a chain of thousands of locals neither takes quadratic time nor the
/// stack); a local that refers to itself, through others or not, is an
/// error at the first such local found. A value nested deeper than
/// [`MAX_VALUE_DEPTH`] (locals wrapping locals) is refused, so that
/// nothing that walks values later can overflow the stack, and so is one
/// of more than [`MAX_VALUE_SIZE`] values (locals doubling locals), so
/// that no chain of them can take the memory.
fn evaluate_locals(
    locals: &[&hcl::Attribute],
    file: &str,
    scope: &mut Scope<'_>,
) -> Result<(), Error> {
    let index: BTreeMap<&str, usize> = order::map(
        locals
            .iter()
            .enumerate()
            .map(|(i, attr)| (attr.key.name.as_str(), i)),
    );
    let deps: Vec<Vec<usize>> = locals
        .iter()
        .map(|attr| {
            let names = local_names(&attr.value);
            names
                .iter()
                .filter_map(|n| index.get(n.as_str()).copied())
                .collect()
        })
        .collect();
    // 0: not reached, 1: waiting for its dependencies, 2: evaluated.
    let mut state = vec![0u8; locals.len()];
    for root in 0..locals.len() {
        if state[root] != 0 {
            continue;
        }
        state[root] = 1;
        let mut stack = vec![(root, 0usize)];
        while let Some((node, next)) = stack.last_mut() {
            let node = *node;
            if let Some(&dep) = deps[node].get(*next) {
                *next += 1;
                match state[dep] {
                    0 => {
                        state[dep] = 1;
                        stack.push((dep, 0));
                    }
                    1 => {
                        let attr = locals[dep];
                        return Err(Error::new(
                            file,
                            attr.key.span.start,
                            format!("local {:?} depends on itself", attr.key.name),
                        ));
                    }
                    _ => {}
                }
                continue;
            }
            let attr = locals[node];
            let value = hcl::eval(&attr.value, scope, file)?;
            let (depth, size) = measure(&value);
            let name = &attr.key.name;
            let too_big = if depth > MAX_VALUE_DEPTH {
                Some(format!(
                    "local {name:?} nests lists and objects deeper than {MAX_VALUE_DEPTH} levels"
                ))
            } else if size > MAX_VALUE_SIZE {
                Some(format!(
                    "local {name:?} holds more than {MAX_VALUE_SIZE} values"
                ))
            } else {
                None
            };
            if let Some(message) = too_big {
                return Err(Error::new(file, attr.key.span.start, message));
            }
            scope.locals.insert(attr.key.name.clone(), value);
            state[node] = 2;
            stack.pop();
        }
    }
    Ok(())
}

/// How deeply a local's value may nest lists and objects: deeper than any
/// file can write one (the parser's limit), shallow enough for every walk
/// of a value to recurse.
const MAX_VALUE_DEPTH: usize = 4 * hcl::MAX_NESTING;

/// How many values a local's value may hold, all levels counted.
const MAX_VALUE_SIZE: usize = 1_000_000;

/// How deeply `value` nests lists and objects, and how many values it
/// holds, found without recursion.
fn measure(value: &Value) -> (usize, usize) {
    let mut deepest = 0;
    let mut size = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        size += 1;
        match value {
            Value::List(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(entries) => stack.extend(entries.iter().map(|(_, v)| (v, level + 1))),
            _ => {}
        }
    }
    (deepest, size)
}

/// The locals that `expr` names.
fn local_names(expr: &Expr) -> Vec<String> {
    let mut names = Vec::new();
    collect_locals(expr, &mut names);
    names
}

fn collect_locals(expr: &Expr, names: &mut Vec<String>) {
    if let Expr::Reference { root, steps, .. } = expr {
        if let (true, Some(Step::Attr(name))) = (root.name == "local", steps.first()) {
            names.push(name.name.clone());
        }
    }
    expr.for_each_child(&mut |child| collect_locals(child, names));
}

#[cfg(test)]
mod tests {
    use super::JobInputs;
    use crate::spec::Job;

    /// A job whose volume's source is `var.vol_id`, declared with `decl`.
    fn job(decl: &str) -> String {
        format!(
            r#"{decl}
job "app" {{
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "${{var.vol_id}}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/true"
      }}
    }}
  }}
}}
"#
        )
    }

    const WITH_DEFAULT: &str =
        "variable \"vol_id\" {\n  type    = string\n  default = \"from-default\"\n}";
    const WITHOUT_DEFAULT: &str = "variable \"vol_id\" {\n  type = string\n}";

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The volume source the job decodes to, or its first error.
    fn source(decl: &str, inputs: &JobInputs) -> String {
        match Job::decode_with(&job(decl), "job.hcl", inputs) {
            Ok(decoded) => decoded.spec.groups[0].volumes[0].source.clone(),
            Err(invalid) => invalid.errors[0].to_string(),
        }
    }

    #[test]
    fn the_default_is_the_value_when_nothing_else_is_given() {
        assert_eq!(source(WITH_DEFAULT, &JobInputs::default()), "from-default");
    }

    #[test]
    fn the_environment_overrides_the_default() {
        let inputs = JobInputs {
            env: pairs(&[("vol_id", "from-env")]),
            ..JobInputs::default()
        };
        assert_eq!(source(WITH_DEFAULT, &inputs), "from-env");
    }

    #[test]
    fn var_files_override_the_environment_and_later_files_win() {
        let inputs = JobInputs {
            env: pairs(&[("vol_id", "from-env")]),
            var_files: pairs(&[
                ("a.hcl", "vol_id = \"from-a\"\n"),
                ("b.json", "{\"vol_id\": \"from-b\"}"),
            ]),
            ..JobInputs::default()
        };
        assert_eq!(source(WITH_DEFAULT, &inputs), "from-b");
    }

    #[test]
    fn flags_override_var_files_and_the_last_flag_wins() {
        let inputs = JobInputs {
            env: pairs(&[("vol_id", "from-env")]),
            var_files: pairs(&[("a.hcl", "vol_id = \"from-a\"\n")]),
            vars: pairs(&[("vol_id", "first"), ("vol_id", "from-flag")]),
            ..JobInputs::default()
        };
        assert_eq!(source(WITH_DEFAULT, &inputs), "from-flag");
    }

    #[test]
    fn a_variable_without_a_value_is_an_error_saying_how_to_set_it() {
        assert_eq!(
            source(WITHOUT_DEFAULT, &JobInputs::default()),
            "job.hcl:1:10: variable \"vol_id\" has no value: give it one with -var vol_id=VALUE, in a -var-file, with NOMAD_VAR_vol_id in the environment, or with a default"
        );
    }

    #[test]
    fn typed_flags_are_read_as_hcl() {
        let decl = "variable \"n\" {\n  type = number\n}\nvariable \"vol_id\" {\n  type = list(string)\n}\nlocals {\n  id = \"${var.vol_id[1]}-${var.n}\"\n}";
        let src = job(decl).replace("${var.vol_id}", "${local.id}");
        let inputs = JobInputs {
            vars: pairs(&[("vol_id", "[\"a\", \"b\"]"), ("n", "3")]),
            ..JobInputs::default()
        };
        let decoded = Job::decode_with(&src, "job.hcl", &inputs).unwrap();
        assert_eq!(decoded.spec.groups[0].volumes[0].source, "b-3");
        let inputs = JobInputs {
            vars: pairs(&[("vol_id", "[\"a\", \"b\"]"), ("n", "three")]),
            ..JobInputs::default()
        };
        assert_eq!(
            Job::decode_with(&src, "job.hcl", &inputs)
                .unwrap_err()
                .errors[0]
                .to_string(),
            "job.hcl:1:10: variable \"n\": -var n must be a number, not \"three\""
        );
    }

    #[test]
    fn a_value_for_an_undeclared_variable_is_a_warning() {
        let inputs = JobInputs {
            vars: pairs(&[("other", "x")]),
            ..JobInputs::default()
        };
        let decoded = Job::decode_with(&job(WITH_DEFAULT), "job.hcl", &inputs).unwrap();
        assert_eq!(
            decoded.warnings[0].to_string(),
            "job.hcl:1:1: warning: -var other: the job file declares no variable \"other\""
        );
    }

    #[test]
    fn under_hcl2_strict_a_value_for_an_undeclared_variable_is_an_error() {
        let inputs = JobInputs {
            vars: pairs(&[("other", "x")]),
            var_files: vec![(
                "v.hcl".to_string(),
                "vol_id = \"a\"\nextra = 1\n".to_string(),
            )],
            strict: true,
            ..JobInputs::default()
        };
        let src = job(WITH_DEFAULT);
        let errors: Vec<String> = Job::decode_with(&src, "job.hcl", &inputs)
            .unwrap_err()
            .errors
            .iter()
            .map(ToString::to_string)
            .collect();
        let want = [
            "v.hcl:2:1: \"extra\" is not a variable of the job file (with -hcl2-strict=false it is a warning)",
            "job.hcl:1:1: -var other: the job file declares no variable \"other\" (with -hcl2-strict=false it is a warning)",
        ];
        assert_eq!(errors, want);
        // The CLI's check before sending the job says the same.
        let found: Vec<String> = inputs
            .undeclared(&src, "job.hcl")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn a_long_chain_of_locals_is_evaluated_in_linear_time() {
        // Each refers to the next, written after it: the worst order.
        let n = 5000;
        let mut decl = String::from("locals {\n");
        for i in 0..n - 1 {
            decl.push_str(&format!("  a{i} = local.a{}\n", i + 1));
        }
        decl.push_str(&format!("  a{} = \"end\"\n}}", n - 1));
        let src = job(&decl).replace("${var.vol_id}", "${local.a0}");
        let decoded = Job::decode_with(&src, "job.hcl", &JobInputs::default()).unwrap();
        assert_eq!(decoded.spec.groups[0].volumes[0].source, "end");
    }

    #[test]
    fn locals_that_nest_too_deep_or_grow_too_big_are_refused() {
        let chain = |n: usize, each: &str| {
            let mut decl = String::from("locals {\n");
            for i in 0..n - 1 {
                decl.push_str(&format!(
                    "  a{i} = {}\n",
                    each.replace("NEXT", &format!("local.a{}", i + 1))
                ));
            }
            decl.push_str(&format!("  a{} = \"x\"\n}}", n - 1));
            job(&decl).replace("${var.vol_id}", "${jsonencode(local.a0)}")
        };
        let error = |src: &str| {
            Job::decode_with(src, "job.hcl", &JobInputs::default())
                .unwrap_err()
                .errors[0]
                .to_string()
        };
        assert!(
            error(&chain(2000, "[NEXT]"))
                .ends_with("nests lists and objects deeper than 256 levels"),
            "{}",
            error(&chain(2000, "[NEXT]"))
        );
        assert!(error(&chain(60, "[NEXT, NEXT]")).ends_with("holds more than 1000000 values"));
    }

    #[test]
    fn validation_conditions_are_checked() {
        let decl = "variable \"vol_id\" {\n  default = \"x\"\n  validation {\n    condition     = contains([\"a\", \"b\"], var.vol_id)\n    error_message = \"The volume must be a or b.\"\n  }\n}";
        assert_eq!(
            source(decl, &JobInputs::default()),
            "job.hcl:1:10: invalid value for variable \"vol_id\": The volume must be a or b."
        );
    }

    #[test]
    fn validation_conditions_may_use_operators() {
        let decl = "variable \"count\" {\n  default = 0\n  validation {\n    condition     = var.count > 0 && var.count <= 3\n    error_message = \"count is 1 to 3.\"\n  }\n}";
        assert_eq!(
            source(decl, &JobInputs::default()),
            "job.hcl:1:10: invalid value for variable \"count\": count is 1 to 3."
        );
    }

    #[test]
    fn locals_may_refer_to_later_locals_but_not_to_themselves() {
        let decl = "variable \"vol_id\" {\n  default = \"x\"\n}\nlocals {\n  a = \"${local.b}-a\"\n  b = upper(var.vol_id)\n}";
        let src = job(decl).replace("${var.vol_id}", "${local.a}");
        let decoded = Job::decode_with(&src, "job.hcl", &JobInputs::default()).unwrap();
        assert_eq!(decoded.spec.groups[0].volumes[0].source, "X-a");
        let src = job("locals {\n  a = local.a\n}").replace("${var.vol_id}", "${local.a}");
        assert_eq!(
            Job::decode_with(&src, "job.hcl", &JobInputs::default())
                .unwrap_err()
                .errors[0]
                .to_string(),
            "job.hcl:2:3: local \"a\" depends on itself"
        );
    }

    #[test]
    fn only_the_environment_values_of_declared_variables_are_kept() {
        let mut inputs = JobInputs {
            env: pairs(&[("vol_id", "v"), ("token", "secret"), ("n", "1")]),
            ..JobInputs::default()
        };
        let src = job(&format!("variables {{\n  n = 0\n}}\n{WITH_DEFAULT}"));
        inputs.keep_declared_env(&src, "job.hcl");
        assert_eq!(inputs.env, pairs(&[("vol_id", "v"), ("n", "1")]));
    }

    #[test]
    fn a_variables_block_declares_variables_with_defaults() {
        assert_eq!(
            source("variables {\n  vol_id = \"v\"\n}", &JobInputs::default()),
            "v"
        );
    }
}
