//! Evaluation of the expressions a file holds: `${var.x}` and
//! `${local.x}` in strings, bare references, function calls, operators,
//! and `for` expressions and splats (`eval/collections.rs`), into the
//! literal values the decoders read.
//!
//! Nomad evaluates a job file's HCL2 expressions on the machine that
//! submits it; csi-agent does the same in one pass between parsing and
//! decoding, so that the decoders only ever see literals and report their
//! errors against the positions of the expressions that made them. What a
//! file may refer to is a [`Scope`]: its variables and locals, and the
//! files `file()` may read, and the names the `for` expressions being
//! evaluated bind. References that are none of these
//! (`${NOMAD_TASK_DIR}`, `${attr.unique.hostname}`) are left in strings as
//! written, for the agent to interpolate when a task starts.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use super::ast::{BinaryOp, Body, Expr, Item, Part, Step, Syntax, UnaryOp};
use super::error::Error;
use super::functions::{self, FileSource};
use super::pos::Pos;
use super::value::{within_string_limit, Value};

mod collections;
mod dynamic;

/// What expressions may refer to: the file's variables and locals, and
/// the files `file()` reads.
#[derive(Debug, Default)]
pub struct Scope<'a> {
    pub vars: BTreeMap<String, Value>,
    pub locals: BTreeMap<String, Value>,
    /// Whether `var.*` and `local.*` are declared in this kind of file at
    /// all (job files only).
    pub declares: bool,
    pub files: Option<&'a FileSource>,
    /// The names the `for` expressions being evaluated bind, innermost
    /// last.
    pub(crate) bound: RefCell<Vec<(String, Value)>>,
    /// How many elements `for` expressions have made so far, against
    /// [`MAX_ITERATIONS`](collections::MAX_ITERATIONS).
    pub(crate) iterations: Cell<usize>,
    /// How many values references to variables, locals and the names of
    /// `for`s have copied so far, against [`MAX_COPIED`]: a file of a few
    /// lines that names a big local many times cannot take the memory.
    pub(crate) copied: Cell<usize>,
    /// How many bytes of text those references have copied, against
    /// [`MAX_COPIED_BYTES`]: a string local doubled through a chain of
    /// locals grows past any memory in a few dozen lines.
    pub(crate) copied_bytes: Cell<usize>,
}

impl<'a> Scope<'a> {
    /// A scope of no variables or locals whose `file()` reads `files`;
    /// the evaluation's own counters, which start at zero, are not the
    /// caller's to set.
    pub fn with_files(files: &'a FileSource) -> Scope<'a> {
        Scope {
            files: Some(files),
            ..Scope::default()
        }
    }
}

/// How many values the references of one scope may copy in all.
pub(crate) const MAX_COPIED: usize = 10_000_000;

/// How many bytes of text the references of one scope may copy in all.
pub const MAX_COPIED_BYTES: usize = 64 << 20;

impl Scope<'_> {
    /// Counts the values of `value`, which a reference copies, against
    /// [`MAX_COPIED`].
    pub(crate) fn charge(&self, value: &Value) -> Result<(), String> {
        let total = self.copied.get().saturating_add(value.size());
        self.copied.set(total);
        if total > MAX_COPIED {
            return Err(format!(
                "the expressions copy more than {MAX_COPIED} values from variables and locals"
            ));
        }
        let bytes = self.copied_bytes.get().saturating_add(value.bytes());
        self.copied_bytes.set(bytes);
        if bytes > MAX_COPIED_BYTES {
            return Err(format!(
                "the expressions copy more than {} MiB of text from variables and locals (the HCL copy limit)",
                MAX_COPIED_BYTES >> 20
            ));
        }
        Ok(())
    }
}

/// Evaluates the expressions of `body` and of the blocks in it, in place.
/// Every error is returned, in reading order.
pub fn evaluate(body: &mut Body, scope: &Scope<'_>, file: &str) -> Result<(), Vec<Error>> {
    let mut errors = Vec::new();
    evaluate_body(body, scope, file, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// [`evaluate`] on one body; each `dynamic` block in it is replaced by the
/// blocks it makes (`dynamic.rs`).
fn evaluate_body(body: &mut Body, scope: &Scope<'_>, file: &str, errors: &mut Vec<Error>) {
    if body.syntax == Syntax::Json {
        dynamic::expand_json_body(body, scope, file, errors);
    }
    for item in std::mem::take(&mut body.items) {
        match item {
            Item::Attribute(mut attr) => {
                if body.syntax == Syntax::Json {
                    dynamic::expand_json(&mut attr.value, scope, file, errors);
                }
                if let Err(err) = evaluate_in_place(&mut attr.value, scope, file) {
                    errors.push(err);
                }
                body.items.push(Item::Attribute(attr));
            }
            Item::Block(block) if block.kind.name == "dynamic" && body.syntax == Syntax::Native => {
                let made = dynamic::expand(block, scope, file, errors);
                body.items.extend(made.into_iter().map(Item::Block));
            }
            Item::Block(mut block) => {
                evaluate_body(&mut block.body, scope, file, errors);
                body.items.push(Item::Block(block));
            }
        }
    }
}

/// Replaces every expression inside `expr` by its value.
pub fn evaluate_in_place(expr: &mut Expr, scope: &Scope<'_>, file: &str) -> Result<(), Error> {
    match expr {
        Expr::List { items, .. } => {
            for item in items {
                evaluate_in_place(item, scope, file)?;
            }
        }
        Expr::Object { entries, .. } => {
            for (_, value) in entries {
                evaluate_in_place(value, scope, file)?;
            }
        }
        Expr::Template { .. }
        | Expr::Reference { .. }
        | Expr::Call { .. }
        | Expr::Unary { .. }
        | Expr::Binary { .. }
        | Expr::Conditional { .. }
        | Expr::For(_)
        | Expr::Traversal { .. } => {
            let span = expr.span();
            *expr = eval(expr, scope, file)?.to_expr(span);
        }
        _ => {}
    }
    Ok(())
}

/// The value of `expr`.
pub fn eval(expr: &Expr, scope: &Scope<'_>, file: &str) -> Result<Value, Error> {
    match expr {
        Expr::String { value, .. } | Expr::Heredoc { value, .. } => {
            Ok(Value::String(value.clone()))
        }
        Expr::Number { value, .. } => Ok(Value::Number(value.clone())),
        Expr::Bool { value, .. } => Ok(Value::Bool(*value)),
        Expr::Null { .. } => Ok(Value::Null),
        Expr::List { items, .. } => items
            .iter()
            .map(|item| eval(item, scope, file))
            .collect::<Result<_, _>>()
            .map(Value::List),
        Expr::Object { entries, .. } => entries
            .iter()
            .map(|(key, value)| Ok((key.name.clone(), eval(value, scope, file)?)))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        Expr::Template { parts, .. } => template(parts, scope, file),
        Expr::Reference { root, steps, .. } => {
            if let Some(value) = collections::bound(scope, &root.name) {
                scope
                    .charge(&value)
                    .map_err(|message| Error::new(file, root.span.start, message))?;
                return collections::traverse(value, steps, scope, file);
            }
            let value = root_value(&root.name, steps, scope)
                .and_then(|value| scope.charge(&value).map(|()| value))
                .map_err(|message| Error::new(file, root.span.start, message))?;
            let skip = usize::from(matches!(root.name.as_str(), "var" | "local"));
            collections::traverse(value, &steps[skip..], scope, file)
        }
        Expr::For(for_expr) => collections::eval_for(for_expr, scope, file),
        Expr::Traversal { source, steps, .. } => {
            let value = eval(source, scope, file)?;
            collections::traverse(value, steps, scope, file)
        }
        Expr::Call { name, args, .. } => {
            let values = args
                .iter()
                .map(|arg| eval(arg, scope, file))
                .collect::<Result<Vec<_>, _>>()?;
            functions::call(&name.name, values, scope.files)
                .map_err(|message| Error::new(file, name.span.start, message))
        }
        Expr::Unary { op, operand, span } => {
            let value = eval(operand, scope, file)?;
            unary(*op, value).map_err(|message| Error::new(file, span.start, message))
        }
        Expr::Binary { op, lhs, rhs, span } => {
            let left = eval(lhs, scope, file)?;
            // `&&` and `||` look at their right side only when they must.
            match (op, &left) {
                (BinaryOp::And, Value::Bool(false)) => return Ok(Value::Bool(false)),
                (BinaryOp::Or, Value::Bool(true)) => return Ok(Value::Bool(true)),
                _ => {}
            }
            let right = eval(rhs, scope, file)?;
            binary(*op, left, right).map_err(|message| Error::new(file, span.start, message))
        }
        Expr::Conditional {
            cond,
            then,
            otherwise,
            ..
        } => match eval(cond, scope, file)? {
            Value::Bool(true) => eval(then, scope, file),
            Value::Bool(false) => eval(otherwise, scope, file),
            other => Err(Error::new(
                file,
                cond.pos(),
                format!(
                    "the condition of '? :' must be a bool, not a {}",
                    other.kind_name()
                ),
            )),
        },
    }
}

/// `!x` and `-x`.
fn unary(op: UnaryOp, value: Value) -> Result<Value, String> {
    match (op, value) {
        (UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
        (UnaryOp::Negate, Value::Number(n)) => n
            .as_f64()
            .map(|v| Value::number(-v))
            .ok_or_else(|| format!("'-' cannot negate {}", n.text())),
        (UnaryOp::Not, other) => Err(format!("'!' needs a bool, not a {}", other.kind_name())),
        (UnaryOp::Negate, other) => Err(format!("'-' needs a number, not a {}", other.kind_name())),
    }
}

/// `a OP b`, with HCL's types: arithmetic and comparison on numbers,
/// `&&` and `||` on bools, `==` and `!=` on any two values.
fn binary(op: BinaryOp, left: Value, right: Value) -> Result<Value, String> {
    let symbol = op.symbol();
    match op {
        BinaryOp::Equal => return Ok(Value::Bool(equal(&left, &right))),
        BinaryOp::NotEqual => return Ok(Value::Bool(!equal(&left, &right))),
        BinaryOp::And | BinaryOp::Or => {
            return match (left, right) {
                (Value::Bool(a), Value::Bool(b)) => Ok(Value::Bool(match op {
                    BinaryOp::And => a && b,
                    _ => a || b,
                })),
                (a, b) => Err(format!(
                    "'{symbol}' needs two bools, not a {} and a {}",
                    a.kind_name(),
                    b.kind_name()
                )),
            };
        }
        _ => {}
    }
    let number = |value: &Value| match value {
        Value::Number(n) => n.as_f64(),
        // HCL converts a string that holds a number.
        Value::String(text) => text.trim().parse::<f64>().ok().filter(|v| v.is_finite()),
        _ => None,
    };
    let (Some(a), Some(b)) = (number(&left), number(&right)) else {
        return Err(format!(
            "'{symbol}' needs two numbers, not a {} and a {}",
            left.kind_name(),
            right.kind_name()
        ));
    };
    let result = match op {
        BinaryOp::Add => Value::number(a + b),
        BinaryOp::Subtract => Value::number(a - b),
        BinaryOp::Multiply => Value::number(a * b),
        BinaryOp::Divide if b == 0.0 => return Err("division by zero".to_string()),
        BinaryOp::Divide => Value::number(a / b),
        BinaryOp::Modulo if b == 0.0 => return Err("modulo by zero".to_string()),
        BinaryOp::Modulo => Value::number(a % b),
        BinaryOp::Less => Value::Bool(a < b),
        BinaryOp::LessEqual => Value::Bool(a <= b),
        BinaryOp::Greater => Value::Bool(a > b),
        BinaryOp::GreaterEqual => Value::Bool(a >= b),
        BinaryOp::Equal | BinaryOp::NotEqual | BinaryOp::And | BinaryOp::Or => {
            unreachable!("handled above")
        }
    };
    Ok(result)
}

/// HCL's equality: numbers by value (`1 == 1.0`), the rest as they are.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| k == k2 && equal(v, v2)))
        }
        _ => a == b,
    }
}

/// The value of a `"...${...}..."` string: the one interpolation's value
/// itself when it is all there is (as HCL does, so `"${var.ports}"` is a
/// list), the parts' text joined otherwise.
fn template(parts: &[Part], scope: &Scope<'_>, file: &str) -> Result<Value, Error> {
    if let [Part::Interpolation(expr)] = parts {
        return eval(expr, scope, file);
    }
    let mut out = String::new();
    render(parts, scope, file, &mut out)?;
    Ok(Value::String(out))
}

/// Appends the text of `parts` to `out`, directives evaluated.
fn render(parts: &[Part], scope: &Scope<'_>, file: &str, out: &mut String) -> Result<(), Error> {
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Interpolation(expr) => {
                let value = eval(expr, scope, file)?;
                let Some(text) = value.as_text() else {
                    return Err(Error::new(
                        file,
                        expr.pos(),
                        format!(
                            "a {} cannot be interpolated into a string",
                            value.kind_name()
                        ),
                    ));
                };
                within_string_limit(out.len() + text.len())
                    .map_err(|message| Error::new(file, expr.pos(), message))?;
                out.push_str(&text);
            }
            Part::If {
                cond,
                then,
                otherwise,
            } => match eval(cond, scope, file)? {
                Value::Bool(true) => render(then, scope, file, out)?,
                Value::Bool(false) => render(otherwise, scope, file, out)?,
                other => {
                    return Err(Error::new(
                        file,
                        cond.pos(),
                        format!(
                            "the condition of '%{{ if }}' must be a bool, not a {}",
                            other.kind_name()
                        ),
                    ))
                }
            },
            Part::For {
                key_var,
                value_var,
                collection,
                body,
            } => collections::render_for(
                (key_var.as_ref(), value_var),
                collection,
                body,
                scope,
                file,
                out,
            )?,
        }
    }
    Ok(())
}

/// The value a reference's root names: `var.NAME`, `local.NAME`.
fn root_value(root: &str, steps: &[Step], scope: &Scope<'_>) -> Result<Value, String> {
    let (kind, table) = match root {
        "var" => ("variable", &scope.vars),
        "local" => ("local", &scope.locals),
        other if steps.is_empty() => {
            return Err(format!(
                "unknown name '{other}' (strings need quotes: \"{other}\")"
            ))
        }
        other => {
            return Err(format!(
                "'{other}' is known only when a task starts: write it inside a string, as in \"${{{other}...}}\", outside function calls"
            ))
        }
    };
    let Some(Step::Attr(name)) = steps.first() else {
        return Err(format!("'{root}' needs a name after it, as in {root}.NAME"));
    };
    if !scope.declares {
        return Err(format!(
            "'{root}.{}': only job files declare variables and locals",
            name.name
        ));
    }
    table.get(&name.name).cloned().ok_or_else(|| match kind {
        "variable" => format!(
            "no variable \"{0}\" is declared: declare it with variable \"{0}\" {{ ... }}",
            name.name
        ),
        _ => format!(
            "no local \"{0}\" is declared: declare it in a locals {{ ... }} block",
            name.name
        ),
    })
}

/// One step into a value: `.name` of an object, `[i]` of a list, `["k"]`
/// of an object. Splats are [`collections::traverse`]'s.
fn index(value: Value, step: &Step, scope: &Scope<'_>, file: &str) -> Result<Value, Error> {
    let (key, pos): (Value, Pos) = match step {
        Step::Attr(name) => (Value::String(name.name.clone()), name.span.start),
        Step::Index(expr) => (eval(expr, scope, file)?, expr.pos()),
        Step::Splat { pos, .. } => return Err(Error::new(file, *pos, "a splat is not an index")),
    };
    let found = match (&value, &key) {
        (Value::Object(_), Value::String(name)) => value.get(name).cloned(),
        (Value::List(items), Value::Number(n)) => n
            .as_u64()
            .and_then(|i| items.get(usize::try_from(i).ok()?).cloned()),
        _ => None,
    };
    found.ok_or_else(|| {
        let key = key.as_text().unwrap_or_else(|| key.kind_name().to_string());
        Error::new(
            file,
            pos,
            format!("a {} has no element {key:?}", value.kind_name()),
        )
    })
}
