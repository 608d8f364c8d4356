"""Protocol front ends: thin translators from another API (OpenAI Responses, Anthropic Messages) into the proxy's
one internal conversation model (a validated :class:`~proxy.api.ChatCompletionRequest`) and from the chat answer
back into that API's objects and event stream. Nothing below them knows which protocol it serves.

:mod:`proxy.frontends.chat_bridge` runs a translated request through the generation controller.
"""
