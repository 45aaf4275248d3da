//! The functions a template may call, as one table: the crate's own
//! families (Go's built-ins, consul-template's on strings, values, numbers
//! and time), and the functions the caller registers, which read the
//! caller's context. The piped value comes last, as in consul-template
//! (`{{ "a,b" | split "," }}` is `split "," "a,b"`).
//!
//! A name the table does not hold is refused when the template is parsed:
//! `function "NAME" not defined`, or the reason the caller gives for it
//! ([`Functions::explain_unknown`]), with the template's line.

use std::ops::{RangeFrom, RangeInclusive};

use crate::{Options, Value};

mod go;
mod strings;
mod values;

/// A function of the crate's own families.
type Builtin = fn(&mut Args<'_>) -> Result<Value, String>;

/// One family of the crate's functions: each name, with how many
/// arguments it takes (at least, at most), and its body.
type Family = &'static [(&'static str, usize, usize, Builtin)];

/// A function the caller registers, over its context `C`: a plain
/// function, or a closure that captures nothing, since what it reads is
/// its arguments and the context. Being a pointer, it holds nothing of
/// `C`'s lifetimes, so a context that borrows outlives no template.
pub type Function<C> = fn(&mut Args<'_>, &C) -> Result<Value, String>;

/// Why a name is not a function, in the caller's words.
type Explain = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The words an action gives a meaning of its own: never a function's
/// name.
const KEYWORDS: &[&str] = &[
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
    "true", "false", "nil",
];

/// The functions a template may call: the crate's families and the
/// caller's, whose context `C` is given when the template renders.
pub struct Functions<C: ?Sized> {
    families: Vec<Family>,
    registered: Vec<(String, Arity, Function<C>)>,
    explain: Option<Explain>,
}

/// How many arguments a function takes: `2` (exactly), `1..=3`, `1..`
/// (no most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arity {
    min: usize,
    /// `usize::MAX` for no most.
    max: usize,
}

impl From<usize> for Arity {
    fn from(n: usize) -> Arity {
        Arity { min: n, max: n }
    }
}

impl From<RangeInclusive<usize>> for Arity {
    fn from(range: RangeInclusive<usize>) -> Arity {
        Arity {
            min: *range.start(),
            max: *range.end(),
        }
    }
}

impl From<RangeFrom<usize>> for Arity {
    fn from(range: RangeFrom<usize>) -> Arity {
        Arity {
            min: range.start,
            max: usize::MAX,
        }
    }
}

impl Arity {
    /// Whether `got` arguments fit: Go's error if they do not.
    fn check(self, got: usize) -> Result<(), String> {
        if (self.min..=self.max).contains(&got) {
            return Ok(());
        }
        let want = if self.min == self.max {
            self.min.to_string()
        } else if self.max == usize::MAX {
            format!("at least {}", self.min)
        } else {
            format!("{} to {}", self.min, self.max)
        };
        Err(format!("wrong number of args: got {got}, want {want}"))
    }
}

/// What a name stands for in a [`Functions`].
enum Found<C: ?Sized> {
    Builtin(Arity, Builtin),
    Registered(Arity, Function<C>),
}

impl<C: ?Sized> Functions<C> {
    /// Go's `text/template` built-ins: `and`, `or`, `not`, `len`, `index`,
    /// `slice`, `print`, `println`, `printf`, `eq`, `ne`, `lt`, `le`, `gt`,
    /// `ge`, `urlquery`, `html` and `js`.
    pub fn go() -> Functions<C> {
        Functions {
            families: vec![go::FUNCTIONS],
            registered: Vec::new(),
            explain: None,
        }
    }

    /// Go's built-ins and consul-template's functions that read nothing
    /// but their arguments and the render's clock: strings (`toLower`,
    /// `split`, `join`, `indent`, `replaceAll`, `contains`, `regexMatch`,
    /// `regexReplaceAll`, ...), conversions (`parseInt`, `parseJSON`,
    /// `toJSON`, `base64Encode`, ...), numbers (`add`, `loop`, `maximum`,
    /// ...) and `timestamp`.
    pub fn consul_template() -> Functions<C> {
        Functions {
            families: vec![go::FUNCTIONS, strings::FUNCTIONS, values::FUNCTIONS],
            registered: Vec::new(),
            explain: None,
        }
    }

    /// Adds `function`, called `name` with `arity` arguments (checked
    /// before it is called), the piped value last, and the context the
    /// template renders with. Its error is the template's, as `error
    /// calling NAME: ...` at the call's line; its value is held to the
    /// bounds every value keeps ([`MAX_OUTPUT`](crate::MAX_OUTPUT),
    /// [`MAX_ITEMS`](crate::MAX_ITEMS)).
    ///
    /// # Panics
    ///
    /// If `name` is not an identifier, is a keyword, or is taken, as Go's
    /// `Funcs` panics on a bad name: the table is the program's, not
    /// input.
    pub fn register(
        &mut self,
        name: &str,
        arity: impl Into<Arity>,
        function: Function<C>,
    ) -> &mut Self {
        let identifier = name.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && name.chars().all(|c| c.is_alphanumeric() || c == '_');
        assert!(identifier, "function name {name:?} is not an identifier");
        assert!(
            !KEYWORDS.contains(&name),
            "function name {name:?} is a keyword"
        );
        assert!(!self.contains(name), "function {name:?} is defined twice");
        self.registered
            .push((name.to_string(), arity.into(), function));
        self
    }

    /// Says why a name that is not a function is not one: `explain(name)`
    /// words the parse error, `function "NAME" ` and then its text; `None`
    /// is "not defined". For a name the caller refuses on purpose (one
    /// that needs what the caller does not have).
    pub fn explain_unknown(
        &mut self,
        explain: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> &mut Self {
        self.explain = Some(Box::new(explain));
        self
    }

    /// Whether a template may call `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    fn find(&self, name: &str) -> Option<Found<C>> {
        if let Some((_, arity, f)) = self.registered.iter().find(|(n, ..)| n == name) {
            return Some(Found::Registered(*arity, *f));
        }
        self.families
            .iter()
            .flat_map(|family| family.iter())
            .find(|(n, ..)| *n == name)
            .map(|(_, min, max, f)| Found::Builtin(Arity::from(*min..=*max), *f))
    }

    /// Whether a template may call `name`: an error that says why not.
    pub(crate) fn check(&self, name: &str) -> Result<(), String> {
        if self.contains(name) {
            return Ok(());
        }
        let why = self.explain.as_ref().and_then(|explain| explain(name));
        Err(format!(
            "function {name:?} {}",
            why.as_deref().unwrap_or("not defined")
        ))
    }

    /// Calls `name` with `values`, in a rendering with `ctx` and
    /// `options`.
    pub(crate) fn call(
        &self,
        name: &str,
        values: Vec<Value>,
        ctx: &C,
        options: &Options,
    ) -> Result<Value, String> {
        let found = self
            .find(name)
            .ok_or_else(|| format!("function {name:?} not defined"))?;
        let mut args = Args { values, options };
        match found {
            Found::Builtin(arity, f) => {
                arity.check(args.values.len())?;
                f(&mut args)
            }
            Found::Registered(arity, f) => {
                arity.check(args.values.len())?;
                f(&mut args, ctx)
            }
        }
    }
}

/// A table of functions as the parser sees it, whatever the caller's
/// context type: one copy of the parser serves every [`Functions`].
pub(crate) trait Names {
    /// Whether a template may call `name`: an error that says why not.
    fn check(&self, name: &str) -> Result<(), String>;
}

impl<C: ?Sized> Names for Functions<C> {
    fn check(&self, name: &str) -> Result<(), String> {
        Functions::check(self, name)
    }
}

/// A table of functions bound to the context one render was given, as
/// the executor calls them: one copy of the executor serves every
/// context type.
pub(crate) trait Calls {
    /// Calls `name` with `values` in the render's `options`.
    fn call(&self, name: &str, values: Vec<Value>, options: &Options) -> Result<Value, String>;
}

/// `functions` with the context `ctx` of one render.
pub(crate) struct Bound<'a, C: ?Sized> {
    pub(crate) functions: &'a Functions<C>,
    pub(crate) ctx: &'a C,
}

impl<C: ?Sized> Calls for Bound<'_, C> {
    fn call(&self, name: &str, values: Vec<Value>, options: &Options) -> Result<Value, String> {
        self.functions.call(name, values, self.ctx, options)
    }
}

impl<C: ?Sized> std::fmt::Debug for Functions<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let builtin = self
            .families
            .iter()
            .flat_map(|family| family.iter().map(|(name, ..)| *name));
        let registered = self.registered.iter().map(|(name, ..)| name.as_str());
        f.debug_struct("Functions")
            .field("names", &builtin.chain(registered).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A call's arguments, the piped value last, and the rendering's
/// [`Options`].
pub struct Args<'a> {
    pub values: Vec<Value>,
    options: &'a Options,
}

impl<'a> Args<'a> {
    /// The options of the rendering the call is part of: for a function
    /// that renders a template of its own, as the caller's does.
    pub fn options(&self) -> &'a Options {
        self.options
    }

    /// Argument `i` as a string: a string, or a number or bool printed.
    pub fn string(&self, i: usize) -> Result<String, String> {
        match &self.values[i] {
            Value::Str(s) => Ok(s.clone()),
            Value::Int(_) | Value::Float(_) | Value::Bool(_) => Ok(self.values[i].to_string()),
            other => Err(format!(
                "argument {} is a {}, not a string",
                i + 1,
                other.kind()
            )),
        }
    }

    /// Argument `i` as an integer: an integer, a whole float, or a string
    /// that spells one.
    pub fn int(&self, i: usize) -> Result<i64, String> {
        match &self.values[i] {
            Value::Int(n) => Ok(*n),
            Value::Float(f) if f.fract() == 0.0 => Ok(*f as i64),
            Value::Str(s) => s
                .trim()
                .parse()
                .map_err(|_| format!("argument {} is {s:?}, not an integer", i + 1)),
            other => Err(format!(
                "argument {} is a {}, not an integer",
                i + 1,
                other.kind()
            )),
        }
    }

    /// Argument `i` as a list: a list, or `nil` as an empty one.
    pub fn list(&self, i: usize) -> Result<Vec<Value>, String> {
        match &self.values[i] {
            Value::List(l) => Ok(l.clone()),
            Value::Nil => Ok(Vec::new()),
            other => Err(format!(
                "argument {} is a {}, not a list",
                i + 1,
                other.kind()
            )),
        }
    }
}
