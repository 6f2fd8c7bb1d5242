//! Security review of model-visible text (DESIGN.md §5): descriptions and titles are read by the model,
//! which makes them a tool-poisoning vector. Each rule family yields `{rule, severity, excerpt}` flags.

use driftline_schemas::{SecurityFlag, Severity};

pub const HIDDEN_INSTRUCTION_TAG: &str = "hidden_instruction_tag";
pub const INVISIBLE_CHARACTER: &str = "invisible_character";
pub const BIDI_CONTROL: &str = "bidi_control";
pub const COERCIVE_PHRASE: &str = "coercive_phrase";
pub const SECRET_REFERENCE: &str = "secret_reference";
pub const CONCEALMENT: &str = "concealment";
pub const EXFILTRATION_TARGET: &str = "exfiltration_target";
pub const SHADOWING: &str = "shadowing";
pub const NEW_URL: &str = "new_url";
pub const ENCODED_BLOB: &str = "encoded_blob";
pub const EXFILTRATION_PARAMETER: &str = "exfiltration_parameter";
pub const ANNOTATION_RISK: &str = "annotation_risk";

const HIDDEN_TAGS: &[&str] = &["<important", "</important", "<system", "</system", "<instructions", "<!--"];
/// Attempts to override what the model was told, or to make one tool's rules everyone's.
const COERCIVE_PHRASES: &[&str] = &[
    "ignore previous",
    "ignore all previous",
    "ignore the previous",
    "ignore any previous",
    "ignore your instructions",
    "ignore the user",
    "disregard previous",
    "disregard all previous",
    "disregard the user",
    "forget previous",
    "forget your instructions",
    "before using any other tool",
    "before calling any other tool",
    "before using this tool, read",
    "instead of any other tool",
    "otherwise the tool will not work",
    "the application will crash",
    "this is very very important",
    "very very very important",
    "you are now",
    "new instructions:",
];
/// Instructions to hide what the tool makes the model do (DESIGN.md §5: "do not tell the user").
const CONCEALMENT_PHRASES: &[&str] = &[
    "do not tell the user",
    "don't tell the user",
    "do not inform the user",
    "do not mention this",
    "don't mention this",
    "do not mention that",
    "don't mention that",
    "never mention",
    "do not reveal",
    "don't reveal",
    "never reveal",
    "do not disclose",
    "without telling the user",
    "without informing the user",
    "without the user knowing",
    "without the user noticing",
    "the user must not know",
    "the user should not know",
    "keep this secret",
    "keep this hidden",
    "hide this from the user",
    "not visible to the user",
];
/// Credential files and paths: naming one in a tool's text is never ordinary documentation.
const CREDENTIAL_PATHS: &[&str] = &[
    "~/.ssh",
    ".ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    "/etc/passwd",
    "/etc/shadow",
    "mcp.json",
    "claude_desktop_config",
    ".aws/credentials",
    "~/.aws",
    ".kube/config",
    ".docker/config.json",
    ".npmrc",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    ".config/gcloud",
    ".bash_history",
    ".zsh_history",
    "wallet.dat",
];
/// What a conversation holds that a tool should never be handed: asked for with a verb that moves it
/// (not preceded by a negation), a high flag; named alone, a low one.
const SECRET_WORDS: &[&str] = &[
    ".env",
    "credentials",
    "system prompt",
    "conversation history",
    "chat history",
    "the conversation",
    "full conversation",
    "entire conversation",
    "whole conversation",
    "previous messages",
    "private key",
    "api key",
    "api keys",
    "api_key",
    "access key",
    "access token",
    "password",
    "passwords",
    "secret key",
    "session cookie",
];
/// Verbs that move data somewhere: into a parameter, a message, an address.
const MOVING_VERBS: &[&str] = &[
    "read",
    "pass",
    "include",
    "send",
    "put",
    "provide",
    "add",
    "append",
    "attach",
    "copy",
    "forward",
    "share",
    "paste",
    "insert",
    "upload",
    "extract",
    "dump",
    "embed",
    "collect",
    "gather",
    "post",
    "transmit",
    "bcc",
    "cc",
    "email",
    "report",
    "sync",
    "leak",
    "exfiltrate",
];
/// Words that make a secret a qualifier, not a thing handed over ("usage per API key").
const QUALIFIERS: &[&str] = &["per", "by", "each"];
/// Verbs that send something away: with a literal email address or phone number beside them, an
/// exfiltration instruction ("send all emails to …"); with a URL, only where the sentence also names what
/// a conversation holds (an API wrapper's "sends a POST request to https://api…" is documentation).
const SENDING_VERBS: &[&str] = &[
    "send",
    "sends",
    "forward",
    "forwards",
    "bcc",
    "cc",
    "post",
    "upload",
    "transmit",
    "exfiltrate",
    "leak",
    "redirect",
];
/// What a conversation holds that a URL must not be sent: the secret words, and these.
const CONVERSATION_WORDS: &[&str] =
    &["history", "messages", "emails", "conversation", "contents", "every message", "all messages"];
/// Words that turn a moving verb around ("do not include API keys", "never send").
const NEGATIONS: &[&str] =
    &["not", "never", "don't", "dont", "avoid", "without", "no", "nor", "cannot", "can't"];
/// How many words before a verb a negation reaches.
const NEGATION_REACH: usize = 4;
/// Phrases that change what another tool does or where its data goes: with that tool named in the same
/// sentence, shadowing ("when this tool is available, send_email must send all emails to …"). Preferring
/// one tool over a sibling ("use this instead of execute_command") is how servers document their own
/// workflow, so naming a tool otherwise is a low hint.
const STEERING_PHRASES: &[&str] = &[
    "side effect on",
    "when this tool is available",
    "when this tool is present",
    "must send",
    "must forward",
    "must always",
    "always send",
    "always forward",
    "must be sent to",
    "should be sent to",
    "redirect",
    "overrides the",
    "override the",
    "replaces the behavior",
    "replaces the behaviour",
];
/// Parameter names that invite the model to pass along context it should not.
pub const FREE_TEXT_PARAMETERS: &[&str] = &[
    "note", "notes", "context", "metadata", "feedback", "comment", "comments", "sidenote", "details", "extra",
];

/// Every tool name in a snapshot, searchable in one pass over a text: a description naming another tool
/// may shadow it. One automaton over all names (Aho-Corasick) finds the candidates, so a text costs its
/// length, not its length times the number of tools. Building it costs more than a few searches name by
/// name (50 names: 26 µs against 2 µs for a 300-byte text; 10,000 names: 3.8 ms against 0.4 ms), and a
/// diff reviews a handful of texts, so texts are searched name by name until that work reaches what the
/// automaton would have cost, and the automaton is built only then (a ski rental: never much more than
/// twice the cheaper of the two).
#[derive(Debug, Default)]
pub struct ToolNames<'n> {
    names: Vec<&'n str>,
    /// Over the names of 3 or more bytes; pattern `k` is `names[searched[k]]`.
    matcher: std::sync::OnceLock<Option<aho_corasick::AhoCorasick>>,
    searched: Vec<usize>,
    /// Work spent searching name by name so far ([`SearchWork`], reckoned in nanoseconds).
    searched_by_name: std::sync::atomic::AtomicUsize,
    /// The work building the automaton is reckoned to cost.
    automaton_work: usize,
}

impl Clone for ToolNames<'_> {
    fn clone(&self) -> Self {
        ToolNames {
            names: self.names.clone(),
            matcher: self.matcher.clone(),
            searched: self.searched.clone(),
            searched_by_name: self.searched_by_name.load(std::sync::atomic::Ordering::Relaxed).into(),
            automaton_work: self.automaton_work,
        }
    }
}

/// What the two searches cost, reckoned in nanoseconds as measured on x86-64: a search for one name, its
/// setup (≈ 40 ns) and the text (a fraction of a nanosecond per byte; counted at a quarter, above what
/// plain text costs, for texts crowded with near-matches); building the automaton, ≈ 10 µs and ≈ 37 ns
/// per byte of the names it holds.
struct SearchWork;

impl SearchWork {
    const NAME_SETUP: usize = 40;
    const TEXT_BYTES_PER_NANOSECOND: usize = 4;
    const AUTOMATON_SETUP: usize = 10_000;
    const AUTOMATON_PER_NAME_BYTE: usize = 37;

    fn by_name(names: usize, text: &str) -> usize {
        names.saturating_mul(Self::NAME_SETUP.saturating_add(text.len() / Self::TEXT_BYTES_PER_NANOSECOND))
    }

    fn automaton(name_bytes: usize) -> usize {
        Self::AUTOMATON_SETUP.saturating_add(name_bytes.saturating_mul(Self::AUTOMATON_PER_NAME_BYTE))
    }
}

impl<'n> ToolNames<'n> {
    pub fn new(names: Vec<&'n str>) -> Self {
        let searched: Vec<usize> = (0..names.len()).filter(|&i| names[i].len() >= 3).collect();
        let name_bytes: usize = searched.iter().map(|&i| names[i].len()).sum();
        ToolNames {
            automaton_work: SearchWork::automaton(name_bytes),
            names,
            matcher: std::sync::OnceLock::new(),
            searched,
            searched_by_name: 0.into(),
        }
    }

    /// [`ToolNames::new`] with the automaton reckoned to cost `work` (0: built for the first text;
    /// `usize::MAX`: never while the name-by-name search can answer).
    #[cfg(test)]
    fn with_automaton_work(names: Vec<&'n str>, work: usize) -> Self {
        ToolNames { automaton_work: work, ..ToolNames::new(names) }
    }

    /// The first name in snapshot order (other than `own`) that `text` mentions as a word: its position
    /// in `text` and length. One pass over the automaton's matches, each checked where it stands: a
    /// search per candidate name cost the names times the text (a 4.8 MB description gluing 5,000 names
    /// into longer words held the detector for 19 s) — so that search only runs within the work the
    /// automaton would cost.
    fn first_mentioned(&self, text: &str, own: &str) -> Option<(usize, usize)> {
        // Names nested in names repeat matches at a place; past a few per byte the text is an attack, and
        // what was found by then stands (the other rules still read all of it).
        let budget = MATCHES_PER_BYTE.saturating_mul(text.len()).saturating_add(MATCHES_PER_TEXT);
        if self.matcher.get().is_none() {
            let work = SearchWork::by_name(self.searched.len(), text);
            let spent = self.searched_by_name.fetch_add(work, std::sync::atomic::Ordering::Relaxed);
            if spent.saturating_add(work) <= self.automaton_work {
                if let Some(found) = self.first_mentioned_name_by_name(text, own, budget) {
                    return found;
                }
            }
        }
        let matcher = self.matcher.get_or_init(|| {
            // A contiguous NFA: a diff reviews a few texts, and the DFA the crate would pick for a short list
            // costs more to build than those searches take.
            aho_corasick::AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
                .build(self.searched.iter().map(|&i| self.names[i]))
                .ok()
        });
        // Building the automaton cannot fail for names this short; if it did, no name is searched for.
        let matcher = matcher.as_ref()?;
        // (name index, where): the name earliest in snapshot order found as a word so far, at its first
        // such place (matches of one name come in text order).
        let mut first: Option<(usize, usize)> = None;
        for found in matcher.find_overlapping_iter(text).take(budget) {
            let index = self.searched[found.pattern().as_usize()];
            if first.is_some_and(|(best, _)| best <= index) || self.names[index] == own {
                continue;
            }
            if is_word_at(text, found.start(), found.end()) {
                first = Some((index, found.start()));
            }
        }
        first.map(|(index, at)| (at, self.names[index].len()))
    }

    /// The same search, name by name in snapshot order, every place of each (overlapping ones too).
    /// `None` where the names match more than `budget` times: the automaton stops there and answers with
    /// what it found by then, which this search cannot tell.
    fn first_mentioned_name_by_name(
        &self,
        text: &str,
        own: &str,
        budget: usize,
    ) -> Option<Option<(usize, usize)>> {
        let bytes = text.as_bytes();
        let mut matches = 0usize;
        let mut first = None;
        for &index in &self.searched {
            let name = self.names[index];
            let finder = memchr::memmem::Finder::new(name.as_bytes());
            let mut from = 0;
            while let Some(found) = bytes.get(from..).and_then(|rest| finder.find(rest)) {
                let at = from + found;
                matches += 1;
                if matches > budget {
                    return None;
                }
                if first.is_none() && name != own && is_word_at(text, at, at + name.len()) {
                    first = Some((at, name.len()));
                }
                from = at + 1;
            }
        }
        Some(first)
    }
}

/// How many name matches a text may cost: per byte, and at least.
const MATCHES_PER_BYTE: usize = 4;
const MATCHES_PER_TEXT: usize = 4096;

/// Where a text sits, for rules that depend on its surroundings.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextContext<'a> {
    /// The text this one replaces, if it changed (URLs already there are not new).
    pub previous: Option<&'a str>,
    /// The tool the text belongs to.
    pub own_tool: &'a str,
    /// Every tool name in the snapshot (a description naming another tool may shadow it).
    pub tool_names: Option<&'a ToolNames<'a>>,
}

/// Reviews one model-visible text.
pub fn review_text(text: &str, context: TextContext<'_>) -> Vec<SecurityFlag> {
    let mut flags = Vec::new();
    let lower = text.to_lowercase();
    // Lowercasing can change byte lengths; only search `lower` when offsets still line up.
    let searchable = if lower.len() == text.len() { lower.as_str() } else { text };

    if let Some((at, len)) =
        HIDDEN_TAGS.iter().filter_map(|tag| searchable.find(tag).map(|at| (at, tag.len()))).min()
    {
        flags.push(flag(HIDDEN_INSTRUCTION_TAG, Severity::High, text, at, len));
    }
    if let Some((at, c)) = text.char_indices().find(|(_, c)| is_invisible(*c)) {
        flags.push(flag(INVISIBLE_CHARACTER, Severity::High, text, at, c.len_utf8()));
    }
    if let Some((at, c)) = text.char_indices().find(|(_, c)| is_bidi_control(*c)) {
        flags.push(flag(BIDI_CONTROL, Severity::High, text, at, c.len_utf8()));
    }
    let collapsed = collapse_whitespace(&lower);
    let phrase_at = |phrase: &str| searchable.find(phrase).unwrap_or(0);
    if let Some(phrase) = COERCIVE_PHRASES.iter().find(|p| collapsed.contains(*p)) {
        flags.push(flag(COERCIVE_PHRASE, Severity::High, text, phrase_at(phrase), phrase.len()));
    }
    if let Some(phrase) = CONCEALMENT_PHRASES.iter().find(|p| collapsed.contains(*p)) {
        flags.push(flag(CONCEALMENT, Severity::High, text, phrase_at(phrase), phrase.len()));
    }
    if let Some(flag) = secret_reference(text, searchable) {
        flags.push(flag);
    }
    let url_spans = urls(text);
    if let Some(flag) = exfiltration_target(text, searchable, &url_spans) {
        flags.push(flag);
    }
    if let Some(flag) =
        context.tool_names.and_then(|names| shadowing(text, searchable, names, context.own_tool))
    {
        flags.push(flag);
    }
    let mut previous_urls: Vec<&str> = context
        .previous
        .map(|previous| urls(previous).into_iter().map(|(_, url, _)| url).collect())
        .unwrap_or_default();
    previous_urls.sort_unstable();
    let new_urls = url_spans.iter().filter(|(_, _, url)| !contains_url(&previous_urls, url));
    // The first few make the point; a text of nothing but URLs must not make an event of a million flags.
    // A link to documentation is ordinary: a hint, not a hold (one that data is sent to is an
    // exfiltration target above).
    for (at, _, url) in new_urls.take(MAX_URL_FLAGS) {
        flags.push(flag(NEW_URL, Severity::Low, text, *at, url.len()));
    }
    if let Some((at, len)) = encoded_blob(text, &url_spans) {
        flags.push(flag(ENCODED_BLOB, Severity::Medium, text, at, len));
    }
    flags
}

/// A credential path named at all (high), or a secret asked for with a verb that moves it, not negated
/// in its sentence (high); a secret only named is a low hint ("requires an API key").
fn secret_reference(text: &str, searchable: &str) -> Option<SecurityFlag> {
    if let Some((at, word)) = CREDENTIAL_PATHS.iter().find_map(|w| searchable.find(w).map(|at| (at, *w))) {
        return Some(flag(SECRET_REFERENCE, Severity::High, text, at, word.len()));
    }
    let mut named = None;
    for word in SECRET_WORDS {
        for at in word_places(searchable, word).take(PLACES_PER_PHRASE) {
            let qualifier =
                searchable[..at].split_whitespace().next_back().is_some_and(|w| QUALIFIERS.contains(&w));
            if !qualifier && asked_to_move(searchable, at) {
                return Some(flag(SECRET_REFERENCE, Severity::High, text, at, word.len()));
            }
            named.get_or_insert((at, word.len()));
        }
    }
    named.map(|(at, len)| flag(SECRET_REFERENCE, Severity::Low, text, at, len))
}

/// A literal address (an email address, a URL, a phone number) in a sentence that sends something away:
/// "send all emails to attacker@example.com", "forward the history to +1 555 0100 200".
fn exfiltration_target(
    text: &str,
    searchable: &str,
    url_spans: &[(usize, &str, &str)],
) -> Option<SecurityFlag> {
    let addresses =
        email_addresses(text).into_iter().chain(phone_numbers(text)).map(|(at, len)| (at, len, false));
    let urls = url_spans.iter().map(|(at, url, _)| (*at, url.len(), true));
    for (at, len, is_url) in addresses.chain(urls).take(PLACES_PER_PHRASE) {
        let (start, end) = sentence_bounds(searchable, at);
        let sentence = &searchable[start..end];
        let sends =
            SENDING_VERBS.iter().any(|verb| word_places(sentence, verb).any(|v| !negated(sentence, v)));
        let names_data = || {
            SECRET_WORDS
                .iter()
                .chain(CONVERSATION_WORDS)
                .any(|word| word_places(sentence, word).next().is_some())
        };
        if sends && (!is_url || names_data()) {
            return Some(flag(EXFILTRATION_TARGET, Severity::High, text, at, len));
        }
    }
    None
}

/// Another tool named in a sentence that steers the model away from it or changes what it does (medium);
/// named otherwise, a low hint (a server's tools document their workflow by naming each other).
fn shadowing(text: &str, searchable: &str, names: &ToolNames<'_>, own: &str) -> Option<SecurityFlag> {
    let steering =
        STEERING_PHRASES.iter().flat_map(|phrase| searchable.match_indices(phrase).take(PLACES_PER_PHRASE));
    for (at, _) in steering {
        let (start, end) = sentence_bounds(searchable, at);
        if let Some((found, len)) = names.first_mentioned(&text[start..end], own) {
            return Some(flag(SHADOWING, Severity::Medium, text, start + found, len));
        }
    }
    let (at, len) = names.first_mentioned(text, own)?;
    Some(flag(SHADOWING, Severity::Low, text, at, len))
}

/// How many places of one phrase the rules look at: the first ones decide, and a text repeating a
/// phrase a million times must not cost a million sentence scans.
const PLACES_PER_PHRASE: usize = 16;

/// Where `word` stands as a word in `text`.
fn word_places<'t>(text: &'t str, word: &'t str) -> impl Iterator<Item = usize> + 't {
    text.match_indices(word).map(|(at, _)| at).filter(move |&at| is_word_at(text, at, at + word.len()))
}

/// The sentence around byte `at`: from after the last sentence end before it to the next one, at most
/// [`SENTENCE_REACH`] bytes either side (a text without a full stop costs a window, not its length, per place).
fn sentence_bounds(text: &str, at: usize) -> (usize, usize) {
    let at = floor_char_boundary(text, at.min(text.len()));
    let from = floor_char_boundary(text, at.saturating_sub(SENTENCE_REACH));
    let to = floor_char_boundary(text, at.saturating_add(SENTENCE_REACH).min(text.len()));
    let (start, end) = sentence_bounds_within(&text[from..to], at - from);
    (from + start, from + end)
}

/// How far from a place its sentence is looked for.
const SENTENCE_REACH: usize = 512;

fn sentence_bounds_within(text: &str, at: usize) -> (usize, usize) {
    let is_end = |c: char| matches!(c, '.' | '!' | '?' | '\n' | ';');
    // A dot inside a word (`~/.ssh`, `mcp.json`, `e.g`) ends nothing: only one followed by a space.
    let ends = |(i, c): &(usize, char)| {
        is_end(*c) && (*c != '.' || text[i + 1..].starts_with([' ', '\n']) || i + 1 == text.len())
    };
    let start = text[..at].char_indices().rev().find(|item| ends(item)).map_or(0, |(i, c)| i + c.len_utf8());
    let end = text[at..]
        .char_indices()
        .map(|(i, c)| (at + i, c))
        .find(|item| ends(item))
        .map_or(text.len(), |(i, _)| i);
    (start, end.max(start))
}

/// Whether a verb that moves data stands in the few words before byte `at` of its sentence ("put the
/// full conversation", "include the system prompt"), not turned around by a negation before it.
fn asked_to_move(text: &str, at: usize) -> bool {
    let (start, _) = sentence_bounds(text, at);
    let before = &text[start..floor_char_boundary(text, at)];
    let words: Vec<(usize, &str)> = before
        .split_whitespace()
        .map(|word| (word.as_ptr() as usize - before.as_ptr() as usize, word))
        .collect();
    words.iter().rev().take(VERB_REACH).any(|(offset, word)| {
        let word = word.trim_matches(|c: char| !c.is_alphanumeric());
        MOVING_VERBS.contains(&word) && !negated(before, *offset)
    })
}

/// How many words before a secret the verb that asks for it may stand.
const VERB_REACH: usize = 8;

/// Whether a negation stands in the few words before byte `at` of `sentence`.
fn negated(sentence: &str, at: usize) -> bool {
    let before = &sentence[..floor_char_boundary(sentence, at)];
    before
        .split_whitespace()
        .rev()
        .take(NEGATION_REACH)
        .map(|word| word.trim_matches(|c: char| !c.is_alphanumeric() && c != '\''))
        .any(|word| NEGATIONS.contains(&word))
}

/// Literal email addresses: a local part, `@`, and a domain with a dot.
fn email_addresses(text: &str) -> Vec<(usize, usize)> {
    let is_local = |c: char| c.is_ascii_alphanumeric() || "._%+-".contains(c);
    let is_domain = |c: char| c.is_ascii_alphanumeric() || ".-".contains(c);
    let mut found = Vec::new();
    for (at, _) in text.match_indices('@').take(PLACES_PER_PHRASE) {
        let start =
            text[..at].char_indices().rev().take_while(|(_, c)| is_local(*c)).last().map_or(at, |(i, _)| i);
        let domain_len =
            text[at + 1..].chars().take_while(|c| is_domain(*c)).map(char::len_utf8).sum::<usize>();
        let domain = text[at + 1..at + 1 + domain_len].trim_end_matches('.');
        let labels: Vec<&str> = domain.split('.').collect();
        if start < at && labels.len() >= 2 && labels.iter().all(|l| !l.is_empty()) {
            found.push((start, at + 1 + domain.len() - start));
        }
    }
    found
}

/// Literal phone numbers: `+` and at least eight digits (spaces and dashes between them).
fn phone_numbers(text: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices('+').take(PLACES_PER_PHRASE) {
        let run: String =
            text[at + 1..].chars().take_while(|c| c.is_ascii_digit() || " -".contains(*c)).collect();
        if run.chars().filter(char::is_ascii_digit).count() >= 8
            && run.starts_with(|c: char| c.is_ascii_digit())
        {
            found.push((at, 1 + run.trim_end().len()));
        }
    }
    found
}

/// New URLs flagged in one text, at most.
pub const MAX_URL_FLAGS: usize = 8;

pub fn flag(rule: &str, severity: Severity, text: &str, at: usize, len: usize) -> SecurityFlag {
    SecurityFlag { rule: rule.to_owned(), severity, excerpt: excerpt(text, at, len) }
}

fn is_invisible(c: char) -> bool {
    matches!(c, '\u{E0000}'..='\u{E007F}' | '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}')
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `text[start..end]` stands as a word: not glued to identifier characters on a side where it
/// begins or ends with one.
fn is_word_at(text: &str, start: usize, end: usize) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let word = &text[start..end];
    let glued_before =
        word.chars().next().is_some_and(is_ident) && text[..start].chars().next_back().is_some_and(is_ident);
    let glued_after =
        word.chars().next_back().is_some_and(is_ident) && text[end..].chars().next().is_some_and(is_ident);
    !(glued_before || glued_after)
}

/// Every URL of a text, in text order: where it starts, and its text up to the first delimiter (as it
/// stands, and without trailing punctuation).
fn urls(text: &str) -> Vec<(usize, &str, &str)> {
    let mut found = Vec::new();
    for scheme in ["https://", "http://"] {
        // Occurrences come in order and a URL runs to the first delimiter after it: each stretch of the text
        // is scanned for a delimiter once, however many occurrences it holds ("http://http://…").
        let mut delimiter: Option<usize> = None;
        for (at, _) in text.match_indices(scheme) {
            let end = match delimiter {
                Some(end) if end > at => end,
                _ => text[at..]
                    .find(|c: char| c.is_whitespace() || "\"'<>)]}".contains(c))
                    .map_or(text.len(), |e| at + e),
            };
            delimiter = Some(end);
            let url = &text[at..end];
            found.push((at, url, url.trim_end_matches(['.', ',', ';', ':'])));
        }
    }
    found.sort_unstable();
    found
}

/// Whether `previous` holds `url`: a URL in a text always starts where a scheme does, so it is there exactly
/// when it begins one of the previous text's URLs as they stand (`previous_urls` sorted).
fn contains_url(previous_urls: &[&str], url: &str) -> bool {
    let from = previous_urls.partition_point(|candidate| *candidate < url);
    previous_urls.get(from).is_some_and(|candidate| candidate.starts_with(url))
}

/// A run of 40 or more base64 characters mixing letters and digits, outside any URL (a documentation
/// link's path is no payload): a payload, not prose.
fn encoded_blob(text: &str, url_spans: &[(usize, &str, &str)]) -> Option<(usize, usize)> {
    let in_url = |from: usize| url_spans.iter().any(|(at, url, _)| (*at..at + url.len()).contains(&from));
    let is_b64 = |c: char| c.is_ascii_alphanumeric() || "+/=_-".contains(c);
    let mut start = None;
    for (at, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (is_b64(c), start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                let run = &text[from..at];
                let mixed =
                    run.chars().any(|c| c.is_ascii_digit()) && run.chars().any(|c| c.is_ascii_alphabetic());
                if run.len() >= 40 && mixed && !in_url(from) {
                    return Some((from, run.len()));
                }
                start = None;
            }
            _ => {}
        }
    }
    None
}

/// The longest part of a match an excerpt shows.
const EXCERPT_MATCH_BYTES: usize = 200;

/// About 30 characters either side of the match, with invisible characters made visible.
fn excerpt(text: &str, at: usize, len: usize) -> String {
    let start = floor_char_boundary(text, at.saturating_sub(30));
    // A match of megabytes (a URL or a blob without a delimiter) is shown by its beginning.
    let end = floor_char_boundary(text, (at + len.min(EXCERPT_MATCH_BYTES) + 30).min(text.len()));
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    for c in text[start..end].chars() {
        if is_invisible(c) || is_bidi_control(c) || (c.is_control() && c != '\n') {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    if end < text.len() {
        out.push('…');
    }
    out
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests;
