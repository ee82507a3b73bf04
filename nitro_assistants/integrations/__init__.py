"""Where reviewers decide outside the admin: Slack's interaction endpoint (extra ``slack``) and
e-mail replies (extra ``email``). Include ``nitro_assistants.integrations.urls`` for Slack; the
e-mail replies come through django-anymail's own inbound webhook URLs."""
