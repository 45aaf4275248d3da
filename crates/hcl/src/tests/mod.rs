//! Tests for the HCL parser, with helpers shared by the test files.

use super::{json, parse, Body, Error, Expr, Item};

mod dynamic_blocks;
mod errors;
mod expressions;
mod files;
mod for_splat;
mod functions;
mod functions_network_regex;
mod json_blocks;
mod json_errors;
mod json_values;
mod literals;
mod robustness;
mod template_directives;

/// The file name every test passes to `parse`.
const FILE: &str = "test.hcl";

/// The file name every test passes to `json::parse`.
const JSON_FILE: &str = "test.json";

/// Parses `src`, failing the test with the error if it does not parse.
fn parse_ok(src: &str) -> Body {
    match parse(src, FILE) {
        Ok(body) => body,
        Err(err) => panic!("expected {src:?} to parse, got {err}"),
    }
}

/// Parses `src`, failing the test if it parses, and returns the error.
fn parse_err(src: &str) -> Error {
    match parse(src, FILE) {
        Ok(body) => panic!("expected {src:?} to fail, got {body:?}"),
        Err(err) => err,
    }
}

/// The displayed error for `src`.
fn error_text(src: &str) -> String {
    parse_err(src).to_string()
}

/// Parses `src` as JSON, failing the test with the error if it does not
/// parse.
fn json_ok(src: &str) -> Body {
    match json::parse(src, JSON_FILE) {
        Ok(body) => body,
        Err(err) => panic!("expected {src:?} to parse, got {err}"),
    }
}

/// The displayed error for the JSON `src`, failing the test if it parses.
fn json_error_text(src: &str) -> String {
    match json::parse(src, JSON_FILE) {
        Ok(body) => panic!("expected {src:?} to fail, got {body:?}"),
        Err(err) => err.to_string(),
    }
}

/// Parses `{"x": value}` and returns the value of `x`.
fn json_value_of(value: &str) -> Expr {
    let src = format!("{{\"x\": {value}}}");
    let body = json_ok(&src);
    match body.attribute("x") {
        Some(attr) => attr.value.clone(),
        None => panic!("no attribute 'x' in {body:?}"),
    }
}

/// The text of the JSON string `value`, decoded.
fn json_string_of(value: &str) -> String {
    let value = json_value_of(value);
    match value.as_str() {
        Some(text) => text.to_string(),
        None => panic!("'x' is a {}, not a string", value.kind_name()),
    }
}

/// Parses `src` and returns the value of its attribute `x`.
fn value_of(src: &str) -> Expr {
    let body = parse_ok(src);
    match body.attribute("x") {
        Some(attr) => attr.value.clone(),
        None => panic!("no attribute 'x' in {body:?}"),
    }
}

/// Parses `src` and returns the text of its string attribute `x`.
fn string_of(src: &str) -> String {
    let value = value_of(src);
    match value.as_str() {
        Some(text) => text.to_string(),
        None => panic!("'x' is a {}, not a string", value.kind_name()),
    }
}

/// Renders a body in a canonical one-item-per-line form, so tests can
/// compare a whole tree against readable text.
fn render(body: &Body) -> String {
    let mut out = String::new();
    render_body(body, 0, &mut out);
    out
}

fn render_body(body: &Body, indent: usize, out: &mut String) {
    for item in &body.items {
        out.push_str(&"  ".repeat(indent));
        match item {
            Item::Attribute(attr) => {
                if attr.key.quoted {
                    out.push_str(&format!("{:?} = ", attr.key.name));
                } else {
                    out.push_str(&format!("{} = ", attr.key.name));
                }
                render_expr(&attr.value, out);
                out.push('\n');
            }
            Item::Block(block) => {
                out.push_str(&block.kind.name);
                for label in &block.labels {
                    if label.quoted {
                        out.push_str(&format!(" {:?}", label.value));
                    } else {
                        out.push_str(&format!(" {}", label.value));
                    }
                }
                out.push_str(" {\n");
                render_body(&block.body, indent + 1, out);
                out.push_str(&"  ".repeat(indent));
                out.push_str("}\n");
            }
        }
    }
}

fn render_parts(parts: &[super::Part], out: &mut String) {
    for part in parts {
        match part {
            super::Part::Text(text) => out.push_str(&format!("{text:?}")),
            super::Part::Interpolation(inner) => {
                out.push_str("${");
                render_expr(inner, out);
                out.push('}');
            }
            super::Part::If {
                cond,
                then,
                otherwise,
            } => {
                out.push_str("%{if ");
                render_expr(cond, out);
                out.push('}');
                render_parts(then, out);
                out.push_str("%{else}");
                render_parts(otherwise, out);
                out.push_str("%{endif}");
            }
            super::Part::For {
                key_var,
                value_var,
                collection,
                body,
            } => {
                out.push_str("%{for ");
                if let Some(key) = key_var {
                    out.push_str(&format!("{}, ", key.name));
                }
                out.push_str(&format!("{} in ", value_var.name));
                render_expr(collection, out);
                out.push('}');
                render_parts(body, out);
                out.push_str("%{endfor}");
            }
        }
    }
}

fn render_expr(expr: &Expr, out: &mut String) {
    match expr {
        Expr::Template { parts, .. } => {
            out.push_str("template(");
            render_parts(parts, out);
            out.push(')');
        }
        Expr::Reference { root, steps, .. } => {
            out.push_str(&root.name);
            render_steps(steps, out);
        }
        Expr::Traversal { source, steps, .. } => {
            out.push('(');
            render_expr(source, out);
            out.push(')');
            render_steps(steps, out);
        }
        Expr::Call { name, args, .. } => {
            out.push_str(&format!("{}(", name.name));
            for (i, arg) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_expr(arg, out);
            }
            out.push(')');
        }
        Expr::String { value, .. } => out.push_str(&format!("{value:?}")),
        Expr::Heredoc { value, .. } => out.push_str(&format!("heredoc({value:?})")),
        Expr::Number { value, .. } => out.push_str(value.text()),
        Expr::Bool { value, .. } => out.push_str(&value.to_string()),
        Expr::Null { .. } => out.push_str("null"),
        Expr::List { items, .. } => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_expr(item, out);
            }
            out.push(']');
        }
        Expr::Object { entries, .. } => {
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if key.quoted {
                    out.push_str(&format!(" {:?} = ", key.name));
                } else {
                    out.push_str(&format!(" {} = ", key.name));
                }
                render_expr(value, out);
            }
            out.push_str(" }");
        }
        Expr::Unary { op, operand, .. } => {
            out.push_str(match op {
                super::UnaryOp::Not => "(!",
                super::UnaryOp::Negate => "(-",
            });
            render_expr(operand, out);
            out.push(')');
        }
        Expr::Binary { op, lhs, rhs, .. } => {
            out.push('(');
            render_expr(lhs, out);
            out.push_str(&format!(" {} ", op.symbol()));
            render_expr(rhs, out);
            out.push(')');
        }
        Expr::Conditional {
            cond,
            then,
            otherwise,
            ..
        } => {
            out.push('(');
            render_expr(cond, out);
            out.push_str(" ? ");
            render_expr(then, out);
            out.push_str(" : ");
            render_expr(otherwise, out);
            out.push(')');
        }
        Expr::For(f) => {
            out.push_str(if f.key.is_some() { "{for " } else { "[for " });
            if let Some(k) = &f.key_var {
                out.push_str(&format!("{}, ", k.name));
            }
            out.push_str(&format!("{} in ", f.value_var.name));
            render_expr(&f.collection, out);
            out.push_str(" : ");
            if let Some(key) = &f.key {
                render_expr(key, out);
                out.push_str(" => ");
            }
            render_expr(&f.value, out);
            if f.grouped {
                out.push_str("...");
            }
            if let Some(cond) = &f.cond {
                out.push_str(" if ");
                render_expr(cond, out);
            }
            out.push_str(if f.key.is_some() { "}" } else { "]" });
        }
    }
}

fn render_steps(steps: &[super::Step], out: &mut String) {
    for step in steps {
        match step {
            super::Step::Attr(name) => out.push_str(&format!(".{}", name.name)),
            super::Step::Index(index) => {
                out.push('[');
                render_expr(index, out);
                out.push(']');
            }
            super::Step::Splat { full: true, .. } => out.push_str("[*]"),
            super::Step::Splat { full: false, .. } => out.push_str(".*"),
        }
    }
}
