"""The building blocks of an answer: prompt rendering and tokens, token budgets, capped
thinking, custom tools, output checks, SSE framing and the stream guard (:mod:`server.plan`
puts them together)."""
