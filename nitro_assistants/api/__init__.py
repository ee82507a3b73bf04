"""The decide API (docs/protocol.md §8): JSON endpoints to read a session's typed interactions and
events and to decide on an interaction. Include ``nitro_assistants.api.urls`` under any prefix;
``<prefix>/openapi.json`` describes it. See docs/api.md."""
