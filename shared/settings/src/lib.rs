//! Settings read from the environment, each variable declared once.
//!
//! A [`Var`] is a variable's name, its default and its meaning. The same
//! declaration parses the variable (an unset or blank variable takes the
//! default, parsed as if it had been set to it) and writes the row of the
//! README's table of variables, so the two cannot disagree. A default the
//! code derives from other settings ([`Default::Derived`]) is described in
//! words and computed by the caller.
//!
//! A selector (`MAPI_QUEUE=local|cloudtasks`) is an enum implementing
//! [`Choice`]; its variable's error lists the choices.
//!
//! Every error names the variable and says what to write instead.
//!
//! Architecture invariant: no setting is read but through its `Var`, and
//! the README's table is generated from the same `Var`s.

use std::str::FromStr;
use std::time::Duration;

/// Where settings are read from: the environment in a deployment, a map
/// under test.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A variable's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Default {
    /// This value, parsed as if the variable had been set to it.
    Value(&'static str),
    /// Computed by the code from other settings; the text says how.
    Derived(&'static str),
    /// None: the variable must be set where its feature is chosen; the text
    /// says when.
    Required(&'static str),
}

/// One environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub default: Default,
    pub meaning: &'static str,
}

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// A selector: an enum whose variants are chosen by name.
pub trait Choice: Sized + Copy + 'static {
    /// Every choice and the name that selects it.
    const CHOICES: &'static [(&'static str, Self)];

    /// The name of this choice.
    fn name(self) -> &'static str
    where
        Self: PartialEq,
    {
        Self::CHOICES.iter().find(|(_, c)| *c == self).map_or("", |(n, _)| n)
    }
}

impl Var {
    /// A variable whose unset value is `default`.
    pub const fn new(name: &'static str, default: &'static str, meaning: &'static str) -> Var {
        Var { name, default: Default::Value(default), meaning }
    }

    /// A variable whose default the code derives from other settings.
    pub const fn derived(name: &'static str, how: &'static str, meaning: &'static str) -> Var {
        Var { name, default: Default::Derived(how), meaning }
    }

    /// A variable with no default.
    pub const fn required(name: &'static str, when: &'static str, meaning: &'static str) -> Var {
        Var { name, default: Default::Required(when), meaning }
    }

    /// The default as the README's table shows it.
    pub fn default_text(&self) -> &'static str {
        match self.default {
            Default::Value(v) | Default::Derived(v) | Default::Required(v) => v,
        }
    }

    /// The value set, trimmed; `None` when unset or blank.
    pub fn get(&self, env: Env<'_>) -> Option<String> {
        env(self.name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// The value set, else the declared default value; `None` only for a
    /// derived or required variable left unset.
    pub fn raw(&self, env: Env<'_>) -> Option<String> {
        self.get(env).or(match self.default {
            Default::Value(v) => Some(v.to_owned()),
            Default::Derived(_) | Default::Required(_) => None,
        })
    }

    /// The value set; an error saying the variable is needed, and why
    /// (`needed_for`: "MAPI_QUEUE=cloudtasks"), when it is not.
    pub fn require(&self, env: Env<'_>, needed_for: &str) -> Result<String, Invalid> {
        self.get(env).ok_or_else(|| Invalid(format!("{needed_for} needs {} ({})", self.name, self.meaning)))
    }

    fn invalid(&self, value: &str, expected: &str) -> Invalid {
        Invalid(format!("{} has an invalid value `{value}`: {expected}", self.name))
    }

    /// The value parsed; `expected` says what a valid one looks like.
    fn parsed<T: FromStr>(&self, value: &str, expected: &str) -> Result<T, Invalid> {
        value.parse().map_err(|_| self.invalid(value, expected))
    }

    /// The value set, else the default value; for a derived or required
    /// variable left unset, an error naming it (a caller that has a
    /// default of its own reads it with [`Var::get`] instead).
    fn value(&self, env: Env<'_>) -> Result<String, Invalid> {
        self.raw(env).ok_or_else(|| Invalid(format!("{} is not set ({})", self.name, self.meaning)))
    }

    /// A whole number (or anything `FromStr`), the default when unset.
    pub fn parse<T: FromStr>(&self, env: Env<'_>) -> Result<T, Invalid> {
        self.parsed(&self.value(env)?, "write a whole number")
    }

    /// As [`Var::parse`], for a variable without a default value: `None`
    /// when unset.
    pub fn parse_opt<T: FromStr>(&self, env: Env<'_>) -> Result<Option<T>, Invalid> {
        self.raw(env).map(|v| self.parsed(&v, "write a whole number")).transpose()
    }

    /// A number of seconds.
    pub fn seconds(&self, env: Env<'_>) -> Result<Duration, Invalid> {
        self.parse::<u64>(env).map(Duration::from_secs)
    }

    /// A number of milliseconds.
    pub fn millis(&self, env: Env<'_>) -> Result<Duration, Invalid> {
        self.parse::<u64>(env).map(Duration::from_millis)
    }

    /// `true`/`false` (also `1`/`0`, `yes`/`no`).
    pub fn flag(&self, env: Env<'_>) -> Result<bool, Invalid> {
        let value = self.value(env)?;
        match value.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(self.invalid(&value, "use true or false")),
        }
    }

    /// A comma-separated list (blank items dropped); the default's items
    /// when unset.
    pub fn list(&self, env: Env<'_>) -> Vec<String> {
        let raw = self.raw(env).unwrap_or_default();
        raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
    }

    /// The choice named by the variable (case-insensitive), the default's
    /// when unset; an error lists the choices.
    pub fn choose<C: Choice>(&self, env: Env<'_>) -> Result<C, Invalid> {
        let value = self.value(env)?;
        C::CHOICES.iter().find(|(n, _)| n.eq_ignore_ascii_case(&value)).map(|(_, c)| *c).ok_or_else(|| {
            let names: Vec<&str> = C::CHOICES.iter().map(|(n, _)| *n).collect();
            let expected = match names.split_last() {
                Some((last, [])) => format!("use {last}"),
                Some((last, rest)) => format!("use {} or {last}", rest.join(", ")),
                None => "nothing can be chosen".to_owned(),
            };
            Invalid(format!("{} `{value}`: {expected}", self.name))
        })
    }
}

/// The README's table rows of `vars`: `| name | default | meaning |`.
pub fn table_rows<'a>(vars: impl IntoIterator<Item = &'a Var>) -> Vec<String> {
    vars.into_iter().map(|v| format!("| `{}` | {} | {} |", v.name, v.default_text(), v.meaning)).collect()
}

/// Checks a list of declarations: names unique, and every default value
/// parses where `parses` says how (the crates' tests call this with their
/// own parser over an environment that sets each variable to its default).
pub fn check_unique(vars: &[&Var]) -> Result<(), Invalid> {
    let mut seen = std::collections::BTreeSet::new();
    for v in vars {
        if !seen.insert(v.name) {
            return Err(Invalid(format!("{} is declared twice", v.name)));
        }
    }
    Ok(())
}

/// An environment in which every variable of `vars` with a default value
/// is set to it, and nothing else: parsing it must give what parsing an
/// empty environment gives.
pub fn defaults_env(vars: &[&Var]) -> impl Fn(&str) -> Option<String> + use<> {
    let set: Vec<(&'static str, &'static str)> = vars
        .iter()
        .filter_map(|v| match v.default {
            Default::Value(d) => Some((v.name, d)),
            Default::Derived(_) | Default::Required(_) => None,
        })
        .collect();
    move |k: &str| set.iter().find(|(n, _)| *n == k).map(|(_, d)| (*d).to_owned())
}

/// The names `parse` looks up when it reads `env`: a declaration's test
/// proves with it that every variable it lists is read.
pub fn names_read(env: Env<'_>, parse: impl FnOnce(Env<'_>)) -> std::collections::BTreeSet<String> {
    let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let recording = |k: &str| {
        asked.borrow_mut().insert(k.to_owned());
        env(k)
    };
    parse(&recording);
    asked.into_inner()
}

/// An environment of exactly these pairs (for tests and tools).
pub fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let m: std::collections::BTreeMap<String, String> =
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |k| m.get(k).cloned()
}

/// Panics unless `parse`, reading `env`, looks up exactly the variables
/// `vars` declares: a declaration's test, so no variable is listed and
/// never read, or read and never listed.
pub fn assert_reads_exactly(vars: &[Var], env: Env<'_>, parse: impl FnOnce(Env<'_>)) {
    let read = names_read(env, parse);
    let listed: std::collections::BTreeSet<String> = vars.iter().map(|v| v.name.to_owned()).collect();
    assert_eq!(read, listed, "the variables read are not the variables listed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Queue {
        Local,
        CloudTasks,
    }

    impl Choice for Queue {
        const CHOICES: &'static [(&'static str, Self)] =
            &[("local", Queue::Local), ("cloudtasks", Queue::CloudTasks)];
    }

    const QUEUE: Var = Var::new("MAPI_QUEUE", "local", "the task queue");
    const GRACE: Var = Var::new("MAPI_GRACE_S", "120", "a grace");
    const URL: Var = Var::derived("MAPI_URL", "MAPI_PUBLIC_URL", "a URL");
    const PROJECT: Var = Var::required("MAPI_PROJECT", "none (necessary for cloudtasks)", "the project");

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn an_unset_or_blank_variable_takes_its_declared_default() {
        assert_eq!(GRACE.seconds(&env(&[])), Ok(Duration::from_secs(120)));
        assert_eq!(GRACE.seconds(&env(&[("MAPI_GRACE_S", "  ")])), Ok(Duration::from_secs(120)));
        assert_eq!(GRACE.seconds(&env(&[("MAPI_GRACE_S", " 7 ")])), Ok(Duration::from_secs(7)));
        assert_eq!(URL.raw(&env(&[])), None, "a derived default is the caller's");
        let unset = PROJECT.parse::<u32>(&env(&[])).expect_err("no default to parse");
        assert_eq!(unset.0, "MAPI_PROJECT is not set (the project)");
        assert_eq!(QUEUE.choose::<Queue>(&env(&[])), Ok(Queue::Local));
        assert_eq!(QUEUE.choose::<Queue>(&env(&[("MAPI_QUEUE", "CloudTasks")])), Ok(Queue::CloudTasks));
        assert_eq!(Queue::CloudTasks.name(), "cloudtasks");
    }

    #[test]
    fn errors_name_the_variable_and_what_to_write() {
        let e = GRACE.seconds(&env(&[("MAPI_GRACE_S", "soon")])).expect_err("not a number");
        assert_eq!(e.0, "MAPI_GRACE_S has an invalid value `soon`: write a whole number");
        let e = QUEUE.choose::<Queue>(&env(&[("MAPI_QUEUE", "pubsub")])).expect_err("no such queue");
        assert_eq!(e.0, "MAPI_QUEUE `pubsub`: use local or cloudtasks");
        let e = PROJECT.require(&env(&[]), "MAPI_QUEUE=cloudtasks").expect_err("unset");
        assert_eq!(e.0, "MAPI_QUEUE=cloudtasks needs MAPI_PROJECT (the project)");
        let flag = Var::new("MAPI_F", "false", "a flag");
        assert_eq!(
            flag.flag(&env(&[("MAPI_F", "maybe")])).expect_err("not a flag").0,
            "MAPI_F has an invalid value `maybe`: use true or false"
        );
    }

    #[test]
    fn the_table_and_the_defaults_environment_come_from_the_declarations() {
        assert_eq!(
            table_rows([&GRACE, &URL]),
            ["| `MAPI_GRACE_S` | 120 | a grace |", "| `MAPI_URL` | MAPI_PUBLIC_URL | a URL |"]
        );
        let d = defaults_env(&[&GRACE, &URL, &PROJECT]);
        assert_eq!(
            (d("MAPI_GRACE_S").as_deref(), d("MAPI_URL"), d("MAPI_PROJECT")),
            (Some("120"), None, None)
        );
        assert!(check_unique(&[&GRACE, &URL]).is_ok());
        assert_eq!(check_unique(&[&GRACE, &GRACE]).expect_err("twice").0, "MAPI_GRACE_S is declared twice");
        let read = names_read(&env(&[]), |e| {
            let _ = GRACE.seconds(e);
        });
        assert_eq!(read.into_iter().collect::<Vec<_>>(), ["MAPI_GRACE_S"]);
        let list = Var::new("MAPI_L", "a, b,,c", "a list");
        assert_eq!(list.list(&env(&[])), ["a", "b", "c"]);
    }
}
