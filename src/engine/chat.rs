//! Chat prompts: OpenAI-style messages, and the formats that turn them into what a model reads.
//!
//! A chat request carries its messages to the engine ([`Prompt::Chat`]), because a model's chat
//! template lives with its tokenizer, in the engine: vLLM applies it with
//! `tokenizer.apply_chat_template(messages, add_generation_prompt=True)`. Only the `plain` format
//! is batchlab's own ([`render_plain`]); it is rendered before the request leaves the workload, so
//! engines never see it, and it is also what a model without a template falls back to.
//!
//! A custom template ([`ChatTemplate`]) is compiled with minijinja when the scenario is loaded, so
//! a syntax error is reported with the template's file and line before anything runs. The engine
//! gets its source and applies it with its own Jinja (the simulator renders it with minijinja).

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::Prompt;

/// One turn of a conversation, as in OpenAI's chat API: `{"role": "user", "content": "Hi"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, or whatever the template knows.
    pub role: String,
    /// The turn's text.
    pub content: String,
    /// Images after the text (`image_url` parts); none for a text-only turn, which is then
    /// serialized as before, `content` a string.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<super::image::Image>,
}

impl Message {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into(), images: Vec::new() }
    }

    /// The same message with `images` after its text.
    pub fn with_images(mut self, images: Vec<super::image::Image>) -> Self {
        self.images = images;
        self
    }
}

/// Which template an engine applies to a chat prompt's messages.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Template {
    /// The model's own (its tokenizer's `chat_template`); plain when the model has none.
    Model,
    /// A template the scenario gives.
    Custom(ChatTemplate),
}

/// A prompt given as messages, for the engine to template.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatPrompt {
    /// The conversation so far; the model writes the next assistant turn.
    pub messages: Vec<Message>,
    /// The template to apply, with `add_generation_prompt = True`.
    pub template: Template,
}

/// How chat messages become a prompt: `workload.request_format`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormat {
    /// batchlab's own text rendering ([`render_plain`]), no template.
    Plain,
    /// The model's own chat template (the default).
    #[default]
    ChatTemplate,
    /// A custom Jinja template.
    Custom(ChatTemplate),
}

impl RequestFormat {
    /// The prompt `messages` become in this format: text for `plain`, else a chat prompt.
    pub fn prompt(&self, messages: Vec<Message>) -> Prompt {
        match self {
            RequestFormat::Plain => Prompt::Text(render_plain(&messages)),
            RequestFormat::ChatTemplate => Prompt::Chat(ChatPrompt { messages, template: Template::Model }),
            RequestFormat::Custom(t) => Prompt::Chat(ChatPrompt { messages, template: Template::Custom(t.clone()) }),
        }
    }
}

/// The `plain` format: each message as `role: content`, joined by newlines, nothing after the
/// last one. `[system "Be brief.", user "Hi"]` is `"system: Be brief.\nuser: Hi"`.
pub fn render_plain(messages: &[Message]) -> String {
    let mut out = String::with_capacity(messages.iter().map(|m| m.role.len() + m.content.len() + 3).sum());
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&m.role);
        out.push_str(": ");
        out.push_str(&m.content);
    }
    out
}

/// Where a custom template came from, for messages and for printing the scenario back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateOrigin {
    /// A Jinja file (absolute).
    File(PathBuf),
    /// Written inline in the scenario.
    Inline,
}

/// A custom chat template, checked to compile. Cheap to clone; compares by source.
#[derive(Clone)]
pub struct ChatTemplate(Arc<Compiled>);

struct Compiled {
    source: String,
    origin: TemplateOrigin,
    env: minijinja::Environment<'static>,
}

/// The name the template has inside its minijinja environment.
const NAME: &str = "chat_template";

/// A chat template that does not compile or does not render, with where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chat template {}{}: {message}", origin_name(.origin), .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TemplateError {
    /// The template's file, or inline.
    pub origin: TemplateOrigin,
    /// 1-based line in the template, where minijinja knows it.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

fn origin_name(origin: &TemplateOrigin) -> String {
    match origin {
        TemplateOrigin::File(path) => path.display().to_string(),
        TemplateOrigin::Inline => "(inline)".to_owned(),
    }
}

impl ChatTemplate {
    /// Compiles `source`. It must look like a template (contain `{{`, `{%` or `{#`, as guidellm
    /// requires), so a mistyped path is not taken for a template that renders itself.
    pub fn new(source: impl Into<String>, origin: TemplateOrigin) -> Result<Self, TemplateError> {
        let source = source.into();
        if !looks_like_template(&source) {
            return Err(TemplateError {
                origin,
                line: None,
                message: "expected a Jinja template (with `{{ … }}` or `{% … %}`), found plain text".to_owned(),
            });
        }
        let mut env = minijinja::Environment::new();
        // Hugging Face's Jinja settings (`transformers.utils.chat_template_utils`).
        let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
        env.set_syntax(syntax.map_err(|e| template_error(&origin, &e))?);
        // Hugging Face templates call Python string methods (`.strip()`, `.startswith()`) and
        // `raise_exception`.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned(NAME, source.clone()).map_err(|e| template_error(&origin, &e))?;
        Ok(ChatTemplate(Arc::new(Compiled { source, origin, env })))
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// Where it came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.0.origin
    }

    /// Renders `messages` as Hugging Face does: `messages`, `add_generation_prompt = true`, and
    /// the model's `bos_token` and `eos_token`.
    pub fn render(&self, messages: &[Message], bos_token: &str, eos_token: &str) -> Result<String, TemplateError> {
        let template = self.0.env.get_template(NAME).map_err(|e| template_error(&self.0.origin, &e))?;
        let context = minijinja::context! {
            messages => minijinja::value::Serde(messages),
            add_generation_prompt => true,
            bos_token => bos_token,
            eos_token => eos_token,
        };
        template.render(context).map_err(|e| template_error(&self.0.origin, &e))
    }
}

/// Whether `s` has a Jinja expression, statement or comment.
pub fn looks_like_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

fn template_error(origin: &TemplateOrigin, e: &minijinja::Error) -> TemplateError {
    let message = match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    };
    TemplateError { origin: origin.clone(), line: e.line(), message }
}

impl PartialEq for ChatTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.0.source == other.0.source
    }
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("origin", &self.0.origin).field("source", &self.0.source).finish()
    }
}

/// As the scenario writes it: the file's path, or the inline source.
impl Serialize for ChatTemplate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0.origin {
            TemplateOrigin::File(path) => path.serialize(s),
            TemplateOrigin::Inline => self.0.source.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<Message> {
        vec![Message::new("system", "Be brief."), Message::new("user", "Hi"), Message::new("assistant", "Hello")]
    }

    #[test]
    fn plain_is_role_prefixed_lines() {
        assert_eq!(render_plain(&conversation()), "system: Be brief.\nuser: Hi\nassistant: Hello");
        assert_eq!(render_plain(&[Message::new("user", "")]), "user: ");
        assert_eq!(render_plain(&[]), "");
    }

    #[test]
    fn formats_make_text_or_chat_prompts() {
        let m = vec![Message::new("user", "Hi")];
        assert_eq!(RequestFormat::Plain.prompt(m.clone()), Prompt::Text("user: Hi".into()));
        assert_eq!(
            RequestFormat::ChatTemplate.prompt(m.clone()),
            Prompt::Chat(ChatPrompt { messages: m.clone(), template: Template::Model })
        );
        let t = ChatTemplate::new("{{ messages[0].content }}", TemplateOrigin::Inline).unwrap();
        let Prompt::Chat(chat) = RequestFormat::Custom(t.clone()).prompt(m) else { panic!() };
        assert_eq!(chat.template, Template::Custom(t));
    }

    #[test]
    fn templates_render_like_hugging_face() {
        let source = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'].strip() }}{{ eos_token }}\n\
                      {% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
        let t = ChatTemplate::new(source, TemplateOrigin::Inline).unwrap();
        let text = t.render(&[Message::new("user", " Hi ")], "<s>", "</s>").unwrap();
        assert_eq!(text, "<s><|user|>\nHi</s>\n<|assistant|>\n");
        assert_eq!(t.source(), source);
    }

    /// `(source, line, text in the message)`.
    fn check_broken(source: &str, line: Option<usize>, needle: &str) {
        let origin = TemplateOrigin::File(PathBuf::from("/t/chat.jinja"));
        let err = ChatTemplate::new(source, origin.clone()).unwrap_err();
        assert_eq!((err.line, &err.origin), (line, &origin), "{source:?}: {err}");
        let message = err.to_string();
        let at = line.map(|l| format!("/t/chat.jinja:{l}: ")).unwrap_or_else(|| "/t/chat.jinja: ".into());
        assert!(message.starts_with(&format!("chat template {at}")), "{message}");
        assert!(message.contains(needle), "{message} should contain {needle:?}");
    }

    #[test]
    fn broken_templates_are_reported_with_their_line() {
        check_broken("{% for m in messages %}\n{{ m.content }}\n", Some(2), "syntax error");
        check_broken("line one\n{{ messages[0].content }\n", Some(2), "syntax error");
        check_broken("{% if x %}\n\n\n{% endfor %}", Some(4), "syntax error");
        check_broken("no template here", None, "expected a Jinja template");
    }

    #[test]
    fn render_errors_name_the_template_too() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}{% endif %}",
            TemplateOrigin::Inline,
        )
        .unwrap();
        let err = t.render(&[Message::new("user", "x")], "", "").unwrap_err();
        assert!(err.to_string().starts_with("chat template (inline):1: "), "{err}");
        assert!(err.to_string().contains("needs a system turn"), "{err}");
    }

    #[test]
    fn templates_compare_by_source_and_serialize_as_written() {
        let a = ChatTemplate::new("{{ x }}", TemplateOrigin::Inline).unwrap();
        let b = ChatTemplate::new("{{ x }}", TemplateOrigin::File("/a.jinja".into())).unwrap();
        assert_eq!(a, b);
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"{{ x }}\"");
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"/a.jinja\"");
    }
}
