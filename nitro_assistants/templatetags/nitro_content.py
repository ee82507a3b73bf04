"""``{% load nitro_content %}``: ``{{ text|markdown }}`` renders model- or host-written
Markdown safely (:func:`nitro_assistants.admin.content.render_markdown`)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from nitro_assistants.admin.content import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown(text: Any) -> SafeString:
    return render_markdown(text)
