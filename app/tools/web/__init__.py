"""Web tools: `web_fetch` (SSRF-guarded fetch, HTML to markdown) and `web_search` (providers).

Modules: `ssrf` (address policy, resolution, the connect-time guard), `fetch` (the guarded
fetcher), `html` (HTML to readable markdown), `search` (Brave, Tavily, Serper), `tools` (the
`Tool`s and `web_tools(settings)`). Import them by module: the package itself loads nothing, so
a process that needs only the SSRF policy (the API checking a tenant's provider base URL) does
not load the HTML parser.
"""
