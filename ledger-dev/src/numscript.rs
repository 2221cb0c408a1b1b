//! The Numscript subset the dev ledger compiles and runs.
//!
//! Supported (docs/LEDGER.md#numscript):
//! - `vars { … }` with `monetary`, `account`, `string` and `number` variables;
//! - `send [ASSET AMOUNT] ( … )` or `send $monetary ( … )`;
//! - `source = @addr | $account | @world`, optionally `allowing unbounded overdraft`
//!   or `allowing overdraft up to [ASSET AMOUNT]`;
//! - `destination = @addr | $account`;
//! - `set_tx_meta("key", value)`; `//` comments.
//!
//! The default (machine) runtime needs newlines where the legacy grammar does, so a
//! one-line `send` fails to compile here exactly as it does on the real ledger;
//! `experimental-interpreter` is whitespace-insensitive. Multi-source/destination
//! blocks, portions, `max` and `*` are not supported and fail to compile with a
//! message that says so.

use std::collections::{BTreeMap, HashMap};

use outbox_core::{Account, Amount, Asset, Metadata, Monetary, Posting};

/// Which Numscript runtime a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// The legacy machine: newline-sensitive; errors are `COMPILATION_FAILED`.
    Machine,
    /// formancehq/numscript: whitespace-insensitive; `INTERPRETER_*` errors.
    Interpreter,
}

/// Why a script did not produce a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScriptError {
    /// Syntax or type error.
    Parse(String),
    /// A variable is missing or its value does not fit its type.
    Vars(String),
    /// A bounded source does not hold the amount.
    InsufficientFund(String),
}

/// The postings and transaction metadata a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) postings: Vec<Posting>,
    pub(crate) tx_meta: Metadata,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VarType {
    Monetary,
    Account,
    String,
    Number,
}

impl VarType {
    fn name(self) -> &'static str {
        match self {
            Self::Monetary => "monetary",
            Self::Account => "account",
            Self::String => "string",
            Self::Number => "number",
        }
    }
}

#[derive(Debug, Clone)]
enum MonetaryExpr {
    Literal(Monetary),
    Var(String),
}

#[derive(Debug, Clone)]
enum AccountExpr {
    Literal(Account),
    Var(String),
}

#[derive(Debug, Clone)]
enum Overdraft {
    None,
    Unbounded,
    UpTo(MonetaryExpr),
}

#[derive(Debug, Clone)]
enum ValueExpr {
    Text(String),
    Number(u64),
    Account(AccountExpr),
    Monetary(MonetaryExpr),
    /// A variable of any type, rendered as a string.
    Var(String),
}

#[derive(Debug, Clone)]
enum Statement {
    Send {
        amount: MonetaryExpr,
        source: AccountExpr,
        overdraft: Overdraft,
        destination: AccountExpr,
    },
    SetTxMeta {
        key: String,
        value: ValueExpr,
    },
}

/// A compiled script: declared variables and statements.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    vars: Vec<(String, VarType)>,
    statements: Vec<Statement>,
    runtime: Runtime,
}

impl Program {
    /// Compiles `source` for `runtime`.
    pub(crate) fn compile(source: &str, runtime: Runtime) -> Result<Self, ScriptError> {
        let tokens = lex(source)?;
        let mut parser = Parser::new(tokens, runtime);
        let program = parser.program()?;
        program.check_variables()?;
        Ok(program)
    }

    /// The script a list of postings stands for (`TxToScriptData`): one `send` each,
    /// from `@world` literally, and with `force` every other source may overdraw.
    pub(crate) fn from_postings(postings: &[Posting], force: bool) -> Self {
        let statements = postings
            .iter()
            .map(|p| Statement::Send {
                amount: MonetaryExpr::Literal(Monetary {
                    asset: p.asset.clone(),
                    amount: p.amount,
                }),
                source: AccountExpr::Literal(p.source.clone()),
                overdraft: if force && !p.source.is_world() {
                    Overdraft::Unbounded
                } else {
                    Overdraft::None
                },
                destination: AccountExpr::Literal(p.destination.clone()),
            })
            .collect();
        Self {
            vars: Vec::new(),
            statements,
            runtime: Runtime::Machine,
        }
    }

    /// Every variable used is declared, with a type that fits where it is used.
    fn check_variables(&self) -> Result<(), ScriptError> {
        let declared: HashMap<&str, VarType> =
            self.vars.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let want = |name: &str, ty: VarType| -> Result<(), ScriptError> {
            match declared.get(name) {
                None => Err(ScriptError::Parse(format!(
                    "variable ${name} is used but not declared in vars {{ }}"
                ))),
                Some(t) if *t != ty => Err(ScriptError::Parse(format!(
                    "variable ${name} is declared as {} but used as {}",
                    t.name(),
                    ty.name()
                ))),
                Some(_) => Ok(()),
            }
        };
        let monetary = |m: &MonetaryExpr| match m {
            MonetaryExpr::Var(name) => want(name, VarType::Monetary),
            MonetaryExpr::Literal(_) => Ok(()),
        };
        let account = |a: &AccountExpr| match a {
            AccountExpr::Var(name) => want(name, VarType::Account),
            AccountExpr::Literal(_) => Ok(()),
        };
        for statement in &self.statements {
            match statement {
                Statement::Send {
                    amount,
                    source,
                    overdraft,
                    destination,
                } => {
                    monetary(amount)?;
                    account(source)?;
                    account(destination)?;
                    if let Overdraft::UpTo(bound) = overdraft {
                        monetary(bound)?;
                    }
                    if matches!(source, AccountExpr::Literal(a) if a.is_world())
                        && !matches!(overdraft, Overdraft::None)
                    {
                        return Err(ScriptError::Parse(
                            "@world is already set to an unbounded overdraft".into(),
                        ));
                    }
                }
                Statement::SetTxMeta { value, .. } => match value {
                    ValueExpr::Var(name) => {
                        if !declared.contains_key(name.as_str()) {
                            return want(name, VarType::String);
                        }
                    }
                    ValueExpr::Account(a) => account(a)?,
                    ValueExpr::Monetary(m) => monetary(m)?,
                    ValueExpr::Text(_) | ValueExpr::Number(_) => {}
                },
            }
        }
        Ok(())
    }

    /// Runs the program with `vars` against current balances.
    ///
    /// `balance(account, asset)` reads the committed balance; sends earlier in the
    /// same script are accounted for here, as the machine does.
    pub(crate) fn run(
        &self,
        vars: &BTreeMap<String, String>,
        balance: impl Fn(&str, &str) -> i128,
    ) -> Result<Outcome, ScriptError> {
        let bound = self.bind(vars)?;
        let mut moved: HashMap<(String, String), i128> = HashMap::new();
        let mut outcome = Outcome {
            postings: Vec::new(),
            tx_meta: Metadata::new(),
        };
        for statement in &self.statements {
            match statement {
                Statement::Send {
                    amount,
                    source,
                    overdraft,
                    destination,
                } => {
                    let monetary = bound.monetary(amount);
                    let source = bound.account(source);
                    let destination = bound.account(destination);
                    if self.runtime == Runtime::Machine
                        && source.is_world()
                        && matches!(
                            statement,
                            Statement::Send {
                                source: AccountExpr::Var(_),
                                ..
                            }
                        )
                    {
                        // The machine refuses a `world` account variable as a source
                        // (TestWorldSourceVariable); write @world literally.
                        return Err(ScriptError::Vars(
                            "@world can only be used as a variable in the experimental interpreter; write @world literally"
                                .into(),
                        ));
                    }
                    let asset = monetary.asset.as_str().to_owned();
                    let amount = i128::from(monetary.amount.minor_units());
                    if !source.is_world() {
                        let key = (source.as_str().to_owned(), asset.clone());
                        let available = balance(source.as_str(), &asset)
                            + moved.get(&key).copied().unwrap_or(0);
                        let allowed = match overdraft {
                            Overdraft::None => Some(available),
                            Overdraft::Unbounded => None,
                            Overdraft::UpTo(bound_expr) => {
                                let limit = bound.monetary(bound_expr);
                                if limit.asset != monetary.asset {
                                    return Err(ScriptError::Parse(format!(
                                        "overdraft bound {limit} is not in the sent asset {}",
                                        monetary.asset
                                    )));
                                }
                                Some(available + i128::from(limit.amount.minor_units()))
                            }
                        };
                        if let Some(allowed) = allowed
                            && allowed < amount
                        {
                            return Err(ScriptError::InsufficientFund(format!(
                                "insufficient fund: account @{source} can send {} {asset} but the script sends [{monetary}]",
                                allowed.max(0)
                            )));
                        }
                    }
                    *moved
                        .entry((source.as_str().to_owned(), asset.clone()))
                        .or_default() -= amount;
                    *moved
                        .entry((destination.as_str().to_owned(), asset))
                        .or_default() += amount;
                    outcome.postings.push(Posting {
                        source,
                        destination,
                        amount: monetary.amount,
                        asset: monetary.asset,
                    });
                }
                Statement::SetTxMeta { key, value } => {
                    outcome.tx_meta.insert(key.clone(), bound.render(value));
                }
            }
        }
        Ok(outcome)
    }

    fn bind(&self, vars: &BTreeMap<String, String>) -> Result<Bound, ScriptError> {
        let mut bound = Bound::default();
        for (name, ty) in &self.vars {
            let text = vars.get(name).ok_or_else(|| {
                ScriptError::Vars(format!("missing variable ${name} ({})", ty.name()))
            })?;
            let field = format!("vars.{name}");
            let value = match ty {
                VarType::Monetary => Value::Monetary(
                    Monetary::parse_field(&field, text)
                        .map_err(|e| ScriptError::Vars(e.to_string()))?,
                ),
                VarType::Account => Value::Account(
                    Account::parse_field(&field, text)
                        .map_err(|e| ScriptError::Vars(e.to_string()))?,
                ),
                VarType::Number => Value::Number(
                    Amount::parse_field(&field, text)
                        .map_err(|e| ScriptError::Vars(e.to_string()))?,
                ),
                VarType::String => Value::Text(text.clone()),
            };
            bound.values.insert(name.clone(), value);
        }
        Ok(bound)
    }
}

#[derive(Debug, Clone)]
enum Value {
    Monetary(Monetary),
    Account(Account),
    Number(Amount),
    Text(String),
}

/// Variable values, checked against their declared types by `bind`.
#[derive(Debug, Default)]
struct Bound {
    values: HashMap<String, Value>,
}

impl Bound {
    // The lookups below cannot fail: `check_variables` proved every use is declared
    // with the right type, and `bind` parsed every declared variable.
    fn monetary(&self, expr: &MonetaryExpr) -> Monetary {
        match expr {
            MonetaryExpr::Literal(m) => m.clone(),
            MonetaryExpr::Var(name) => match self.values.get(name) {
                Some(Value::Monetary(m)) => m.clone(),
                other => unreachable!("${name} checked as monetary, bound to {other:?}"),
            },
        }
    }

    fn account(&self, expr: &AccountExpr) -> Account {
        match expr {
            AccountExpr::Literal(a) => a.clone(),
            AccountExpr::Var(name) => match self.values.get(name) {
                Some(Value::Account(a)) => a.clone(),
                other => unreachable!("${name} checked as account, bound to {other:?}"),
            },
        }
    }

    /// `set_tx_meta` stores strings: an account as its address, a monetary as
    /// `"ASSET AMOUNT"` (machine `NewStringFromValue`).
    fn render(&self, expr: &ValueExpr) -> String {
        match expr {
            ValueExpr::Text(s) => s.clone(),
            ValueExpr::Number(n) => n.to_string(),
            ValueExpr::Account(a) => self.account(a).to_string(),
            ValueExpr::Monetary(m) => self.monetary(m).to_string(),
            ValueExpr::Var(name) => match self.values.get(name) {
                Some(Value::Monetary(m)) => m.to_string(),
                Some(Value::Account(a)) => a.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Text(s)) => s.clone(),
                None => unreachable!("${name} checked as declared"),
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Newline,
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Equals,
    Comma,
    /// `@address`, without the `@`.
    Account(String),
    /// `$name`, without the `$`.
    Var(String),
    /// Keywords, types and asset codes.
    Word(String),
    Number(String),
    Str(String),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Self::Newline => "a newline".into(),
            Self::LBrace => "'{'".into(),
            Self::RBrace => "'}'".into(),
            Self::LParen => "'('".into(),
            Self::RParen => "')'".into(),
            Self::LBracket => "'['".into(),
            Self::RBracket => "']'".into(),
            Self::Equals => "'='".into(),
            Self::Comma => "','".into(),
            Self::Account(a) => format!("@{a}"),
            Self::Var(v) => format!("${v}"),
            Self::Word(w) => format!("'{w}'"),
            Self::Number(n) => n.clone(),
            Self::Str(s) => format!("{s:?}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn lex(source: &str) -> Result<Vec<Token>, ScriptError> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let take_while = |i: &mut usize, pred: &dyn Fn(char) -> bool| -> String {
        let start = *i;
        while *i < chars.len() && pred(chars[*i]) {
            *i += 1;
        }
        chars[start..*i].iter().collect()
    };
    while i < chars.len() {
        let c = chars[i];
        let simple = match c {
            '{' => Some(Tok::LBrace),
            '}' => Some(Tok::RBrace),
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            '[' => Some(Tok::LBracket),
            ']' => Some(Tok::RBracket),
            '=' => Some(Tok::Equals),
            ',' => Some(Tok::Comma),
            _ => None,
        };
        if let Some(tok) = simple {
            tokens.push(Token { tok, line });
            i += 1;
            continue;
        }
        match c {
            '\n' => {
                tokens.push(Token {
                    tok: Tok::Newline,
                    line,
                });
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '@' => {
                i += 1;
                let name = take_while(&mut i, &|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':')
                });
                if name.is_empty() {
                    return Err(ScriptError::Parse(format!(
                        "line {line}: '@' must be followed by an account address"
                    )));
                }
                tokens.push(Token {
                    tok: Tok::Account(name),
                    line,
                });
            }
            '$' => {
                i += 1;
                let name = take_while(&mut i, &|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
                });
                if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                    return Err(ScriptError::Parse(format!(
                        "line {line}: a variable is '$' followed by [a-z_][a-z0-9_]*"
                    )));
                }
                tokens.push(Token {
                    tok: Tok::Var(name),
                    line,
                });
            }
            '"' => {
                i += 1;
                let mut text = String::new();
                loop {
                    match chars.get(i) {
                        None | Some('\n') => {
                            return Err(ScriptError::Parse(format!(
                                "line {line}: unterminated string"
                            )));
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some(&e @ ('"' | '\\')) => text.push(e),
                                Some('n') => text.push('\n'),
                                _ => {
                                    return Err(ScriptError::Parse(format!(
                                        "line {line}: bad escape in string"
                                    )));
                                }
                            }
                            i += 2;
                        }
                        Some(&c) => {
                            text.push(c);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token {
                    tok: Tok::Str(text),
                    line,
                });
            }
            c if c.is_ascii_digit() => {
                let digits = take_while(&mut i, &|c| c.is_ascii_digit());
                tokens.push(Token {
                    tok: Tok::Number(digits),
                    line,
                });
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let word = take_while(&mut i, &|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '_' | '/')
                });
                tokens.push(Token {
                    tok: Tok::Word(word),
                    line,
                });
            }
            '*' => {
                return Err(ScriptError::Parse(format!(
                    "line {line}: sending all with [ASSET *] is not supported by the dev ledger"
                )));
            }
            '%' => {
                return Err(ScriptError::Parse(format!(
                    "line {line}: portions are not supported by the dev ledger"
                )));
            }
            other => {
                return Err(ScriptError::Parse(format!(
                    "line {line}: unexpected character {other:?}"
                )));
            }
        }
    }
    Ok(tokens)
}

// ---------------------------------------------------------------------------
// Parser

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Machine runtime: newlines are part of the grammar.
    strict: bool,
}

impl Parser {
    fn new(tokens: Vec<Token>, runtime: Runtime) -> Self {
        let strict = runtime == Runtime::Machine;
        // The interpreter's grammar ignores whitespace, newlines included.
        let tokens = if strict {
            tokens
        } else {
            tokens
                .into_iter()
                .filter(|t| t.tok != Tok::Newline)
                .collect()
        };
        Self {
            tokens,
            pos: 0,
            strict,
        }
    }

    fn runtime(&self) -> Runtime {
        if self.strict {
            Runtime::Machine
        } else {
            Runtime::Interpreter
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn line(&self) -> usize {
        self.tokens
            .get(self.pos)
            .or_else(|| self.tokens.last())
            .map_or(1, |t| t.line)
    }

    fn error(&self, expected: &str) -> ScriptError {
        let found = self
            .peek()
            .map_or_else(|| "the end of the script".to_owned(), Tok::describe);
        ScriptError::Parse(format!(
            "line {}: expected {expected}, found {found}",
            self.line()
        ))
    }

    fn next(&mut self) -> Option<Tok> {
        let tok = self.tokens.get(self.pos).map(|t| t.tok.clone());
        self.pos += 1;
        tok
    }

    fn expect(&mut self, tok: &Tok) -> Result<(), ScriptError> {
        if self.peek() == Some(tok) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&tok.describe()))
        }
    }

    fn expect_word(&mut self, word: &str) -> Result<(), ScriptError> {
        match self.peek() {
            Some(Tok::Word(w)) if w == word => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.error(&format!("'{word}'"))),
        }
    }

    fn skip_newlines(&mut self) -> usize {
        let start = self.pos;
        while self.peek() == Some(&Tok::Newline) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// The machine grammar needs a newline here; the interpreter does not.
    fn newline(&mut self) -> Result<(), ScriptError> {
        if self.skip_newlines() == 0 && self.strict {
            return Err(self
                .error("a newline (the machine runtime needs one statement or clause per line)"));
        }
        Ok(())
    }

    fn program(&mut self) -> Result<Program, ScriptError> {
        let mut program = Program {
            vars: Vec::new(),
            statements: Vec::new(),
            runtime: self.runtime(),
        };
        self.skip_newlines();
        if matches!(self.peek(), Some(Tok::Word(w)) if w == "vars") {
            program.vars = self.vars()?;
            if self.peek().is_some() {
                self.newline()?;
            }
        }
        loop {
            self.skip_newlines();
            if self.peek().is_none() {
                break;
            }
            program.statements.push(self.statement()?);
            if self.peek().is_some() {
                self.newline()?;
            }
        }
        Ok(program)
    }

    fn vars(&mut self) -> Result<Vec<(String, VarType)>, ScriptError> {
        self.expect_word("vars")?;
        self.expect(&Tok::LBrace)?;
        self.newline()?;
        let mut vars: Vec<(String, VarType)> = Vec::new();
        while self.peek() != Some(&Tok::RBrace) {
            let ty = match self.next() {
                Some(Tok::Word(w)) => match w.as_str() {
                    "monetary" => VarType::Monetary,
                    "account" => VarType::Account,
                    "string" => VarType::String,
                    "number" => VarType::Number,
                    "portion" | "asset" => {
                        return Err(ScriptError::Parse(format!(
                            "line {}: variables of type {w} are not supported by the dev ledger",
                            self.line()
                        )));
                    }
                    _ => {
                        self.pos -= 1;
                        return Err(
                            self.error("a variable type (monetary, account, string, number)")
                        );
                    }
                },
                None => return Err(self.error("'}'")),
                Some(_) => {
                    self.pos -= 1;
                    return Err(self.error("a variable type (monetary, account, string, number)"));
                }
            };
            let name = match self.next() {
                Some(Tok::Var(name)) => name,
                _ => {
                    self.pos -= 1;
                    return Err(self.error("a variable name ($name)"));
                }
            };
            if vars.iter().any(|(n, _)| *n == name) {
                return Err(ScriptError::Parse(format!(
                    "line {}: variable ${name} declared twice",
                    self.line()
                )));
            }
            vars.push((name, ty));
            self.newline()?;
        }
        self.expect(&Tok::RBrace)?;
        Ok(vars)
    }

    fn statement(&mut self) -> Result<Statement, ScriptError> {
        match self.peek() {
            Some(Tok::Word(w)) if w == "send" => self.send(),
            Some(Tok::Word(w)) if w == "set_tx_meta" => self.set_tx_meta(),
            Some(Tok::Word(w))
                if w == "set_account_meta" || w == "save" || w == "print" || w == "fail" =>
            {
                Err(ScriptError::Parse(format!(
                    "line {}: '{w}' is not supported by the dev ledger",
                    self.line()
                )))
            }
            _ => Err(self.error("a statement (send or set_tx_meta)")),
        }
    }

    fn send(&mut self) -> Result<Statement, ScriptError> {
        self.expect_word("send")?;
        let amount = self.monetary()?;
        self.expect(&Tok::LParen)?;
        self.newline()?;
        let mut source = None;
        let mut destination = None;
        while self.peek() != Some(&Tok::RParen) {
            match self.peek() {
                Some(Tok::Word(w)) if w == "source" && source.is_none() => {
                    self.pos += 1;
                    self.expect(&Tok::Equals)?;
                    source = Some(self.source()?);
                }
                Some(Tok::Word(w)) if w == "destination" && destination.is_none() => {
                    self.pos += 1;
                    self.expect(&Tok::Equals)?;
                    destination = Some(self.destination()?);
                }
                _ => {
                    return Err(self.error(match (&source, &destination) {
                        (None, None) => "'source' or 'destination'",
                        (None, Some(_)) => "'source'",
                        (Some(_), None) => "'destination'",
                        (Some(_), Some(_)) => "')'",
                    }));
                }
            }
            self.newline()?;
        }
        self.expect(&Tok::RParen)?;
        let (source, overdraft) =
            source.ok_or_else(|| self.error("a 'source = …' clause before ')'"))?;
        let destination =
            destination.ok_or_else(|| self.error("a 'destination = …' clause before ')'"))?;
        Ok(Statement::Send {
            amount,
            source,
            overdraft,
            destination,
        })
    }

    fn monetary(&mut self) -> Result<MonetaryExpr, ScriptError> {
        match self.next() {
            Some(Tok::Var(name)) => Ok(MonetaryExpr::Var(name)),
            Some(Tok::LBracket) => {
                let line = self.line();
                let asset = match self.next() {
                    Some(Tok::Word(w)) => Asset::parse(&w)
                        .map_err(|e| ScriptError::Parse(format!("line {line}: {e}")))?,
                    _ => {
                        self.pos -= 1;
                        return Err(self.error("an asset code such as USD/2"));
                    }
                };
                let amount = match self.next() {
                    Some(Tok::Number(n)) => Amount::parse_field("amount", &n)
                        .map_err(|e| ScriptError::Parse(format!("line {line}: {e}")))?,
                    _ => {
                        self.pos -= 1;
                        return Err(self.error("an amount in minor units"));
                    }
                };
                self.expect(&Tok::RBracket)?;
                Ok(MonetaryExpr::Literal(Monetary { asset, amount }))
            }
            _ => {
                self.pos -= 1;
                Err(self.error("a monetary ([ASSET AMOUNT] or $variable)"))
            }
        }
    }

    fn account(&mut self) -> Result<AccountExpr, ScriptError> {
        match self.next() {
            Some(Tok::Account(address)) => {
                let line = self.line();
                Account::parse(&address)
                    .map(AccountExpr::Literal)
                    .map_err(|e| ScriptError::Parse(format!("line {line}: {e}")))
            }
            Some(Tok::Var(name)) => Ok(AccountExpr::Var(name)),
            Some(Tok::LBrace) => Err(ScriptError::Parse(format!(
                "line {}: multiple sources or destinations ({{ … }}) are not supported by the dev ledger",
                self.line()
            ))),
            _ => {
                self.pos -= 1;
                Err(self.error("an account (@address or $variable)"))
            }
        }
    }

    fn source(&mut self) -> Result<(AccountExpr, Overdraft), ScriptError> {
        let account = self.account()?;
        if !matches!(self.peek(), Some(Tok::Word(w)) if w == "allowing") {
            return Ok((account, Overdraft::None));
        }
        self.pos += 1;
        match self.peek() {
            Some(Tok::Word(w)) if w == "unbounded" => {
                self.pos += 1;
                self.expect_word("overdraft")?;
                Ok((account, Overdraft::Unbounded))
            }
            Some(Tok::Word(w)) if w == "overdraft" => {
                self.pos += 1;
                self.expect_word("up")?;
                self.expect_word("to")?;
                Ok((account, Overdraft::UpTo(self.monetary()?)))
            }
            _ => Err(self.error("'unbounded overdraft' or 'overdraft up to [ASSET AMOUNT]'")),
        }
    }

    fn destination(&mut self) -> Result<AccountExpr, ScriptError> {
        self.account()
    }

    fn set_tx_meta(&mut self) -> Result<Statement, ScriptError> {
        self.expect_word("set_tx_meta")?;
        self.expect(&Tok::LParen)?;
        let key = match self.next() {
            Some(Tok::Str(key)) => key,
            _ => {
                self.pos -= 1;
                return Err(self.error("a metadata key as a \"string\""));
            }
        };
        self.expect(&Tok::Comma)?;
        let value = match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                ValueExpr::Text(s)
            }
            Some(Tok::Number(n)) => {
                let line = self.line();
                let n = Amount::parse_field("number", n)
                    .map_err(|e| ScriptError::Parse(format!("line {line}: {e}")))?;
                self.pos += 1;
                ValueExpr::Number(n.minor_units())
            }
            Some(Tok::Var(name)) => {
                let name = name.clone();
                self.pos += 1;
                ValueExpr::Var(name)
            }
            Some(Tok::Account(_)) => ValueExpr::Account(self.account()?),
            Some(Tok::LBracket) => ValueExpr::Monetary(self.monetary()?),
            _ => {
                return Err(
                    self.error("a value (\"text\", number, @account, [ASSET AMOUNT] or $variable)")
                );
            }
        };
        self.expect(&Tok::RParen)?;
        Ok(Statement::SetTxMeta { key, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const REFERENCE: &str = "vars {\n  monetary $amount\n  account $dst\n}\nsend $amount (\n  source = @world\n  destination = $dst\n)\nset_tx_meta(\"k\", \"v\")\n";

    #[test]
    fn runs_the_reference_subset() {
        let program = Program::compile(REFERENCE, Runtime::Machine).unwrap();
        let out = program
            .run(
                &vars(&[
                    ("amount", "USD/2 48500000"),
                    ("dst", "merchants:4471:available"),
                ]),
                |_, _| 0,
            )
            .unwrap();
        assert_eq!(out.postings.len(), 1);
        assert_eq!(out.postings[0].source.as_str(), "world");
        assert_eq!(
            out.postings[0].destination.as_str(),
            "merchants:4471:available"
        );
        assert_eq!(out.postings[0].amount.minor_units(), 48_500_000);
        assert_eq!(out.tx_meta.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn machine_needs_newlines_interpreter_does_not() {
        let one_line = "send [USD 100] ( source = @world destination = @alice )";
        assert!(matches!(
            Program::compile(one_line, Runtime::Machine),
            Err(ScriptError::Parse(_))
        ));
        let program = Program::compile(one_line, Runtime::Interpreter).unwrap();
        assert_eq!(
            program
                .run(&BTreeMap::new(), |_, _| 0)
                .unwrap()
                .postings
                .len(),
            1
        );
    }

    #[test]
    fn funds_are_checked_across_sends() {
        let script = "send [USD 60] (\n source = @a\n destination = @b\n)\nsend [USD 60] (\n source = @a\n destination = @c\n)";
        let program = Program::compile(script, Runtime::Machine).unwrap();
        let err = program.run(&BTreeMap::new(), |_, _| 100).unwrap_err();
        assert!(matches!(err, ScriptError::InsufficientFund(_)), "{err:?}");
        assert_eq!(
            program
                .run(&BTreeMap::new(), |_, _| 120)
                .unwrap()
                .postings
                .len(),
            2
        );
    }

    #[test]
    fn overdrafts() {
        let unbounded =
            "send [USD 60] (\n source = @a allowing unbounded overdraft\n destination = @b\n)";
        let p = Program::compile(unbounded, Runtime::Machine).unwrap();
        assert!(p.run(&BTreeMap::new(), |_, _| 0).is_ok());
        let bounded =
            "send [USD 60] (\n source = @a allowing overdraft up to [USD 50]\n destination = @b\n)";
        let p = Program::compile(bounded, Runtime::Machine).unwrap();
        assert!(p.run(&BTreeMap::new(), |_, _| 10).is_ok());
        assert!(matches!(
            p.run(&BTreeMap::new(), |_, _| 9),
            Err(ScriptError::InsufficientFund(_))
        ));
        let world =
            "send [USD 1] (\n source = @world allowing unbounded overdraft\n destination = @b\n)";
        assert!(matches!(
            Program::compile(world, Runtime::Machine),
            Err(ScriptError::Parse(_))
        ));
    }

    #[test]
    fn variable_errors() {
        let p = Program::compile(REFERENCE, Runtime::Machine).unwrap();
        assert!(matches!(
            p.run(&vars(&[("amount", "USD/2 1")]), |_, _| 0),
            Err(ScriptError::Vars(_))
        ));
        assert!(matches!(
            p.run(&vars(&[("amount", "1 USD"), ("dst", "a")]), |_, _| 0),
            Err(ScriptError::Vars(_))
        ));
        let undeclared = "send $amount (\n source = @world\n destination = @a\n)";
        assert!(matches!(
            Program::compile(undeclared, Runtime::Machine),
            Err(ScriptError::Parse(_))
        ));
        let world_var =
            "vars {\n account $src\n}\nsend [USD 1] (\n source = $src\n destination = @a\n)";
        let p = Program::compile(world_var, Runtime::Machine).unwrap();
        assert!(matches!(
            p.run(&vars(&[("src", "world")]), |_, _| 0),
            Err(ScriptError::Vars(_))
        ));
    }

    #[test]
    fn set_tx_meta_renders_values_as_strings() {
        let script = "vars {\n monetary $m\n account $a\n}\nset_tx_meta(\"m\", $m)\nset_tx_meta(\"a\", $a)\nset_tx_meta(\"n\", 42)\nsend $m (\n source = @world\n destination = $a\n)";
        let p = Program::compile(script, Runtime::Machine).unwrap();
        let out = p
            .run(&vars(&[("m", "EUR/2 5"), ("a", "x:y")]), |_, _| 0)
            .unwrap();
        assert_eq!(out.tx_meta["m"], "EUR/2 5");
        assert_eq!(out.tx_meta["a"], "x:y");
        assert_eq!(out.tx_meta["n"], "42");
    }
}
