#!/usr/bin/env python3
"""Captures real MCP servers' tools/list answers for the tool-search labelled set
(tests/data/tool-search/real-tools.json).

Run it in a scratch directory where the servers are installed (npm and a venv):
    npm install @modelcontextprotocol/server-filesystem ... @playwright/mcp ...   (see SERVERS)
    python3 -m venv venv && venv/bin/pip install mcp-server-git mcp-server-fetch mcp-server-time
    python3 capture-tools.py [SERVER...]      # writes out/SERVER.json
Run it with HOME pointing at a scratch directory: some servers write their settings there.
The servers' `initialize` answers (serverInfo: name, title, version; instructions) are kept
beside their tools: the ranker reads a server's title and instructions too.
Each server is started over stdio with placeholder credentials (none is contacted: tools/list
needs no account), sent initialize, notifications/initialized and tools/list, then killed.
real-tools.json was assembled from out/*.json with each package's name and version (redis and
sqlite did not answer initialize without their service, so they are not in the set).
"""
import json, subprocess, sys, os, select, time
os.makedirs("out", exist_ok=True)
SERVERS = servers = {
 "filesystem": (["node","node_modules/@modelcontextprotocol/server-filesystem/dist/index.js","/tmp"], {}),
 "memory": (["node","node_modules/@modelcontextprotocol/server-memory/dist/index.js"], {}),
 "github": (["node","node_modules/@modelcontextprotocol/server-github/dist/index.js"], {"GITHUB_PERSONAL_ACCESS_TOKEN":"x"}),
 "puppeteer": (["node","node_modules/@modelcontextprotocol/server-puppeteer/dist/index.js"], {}),
 "slack": (["node","node_modules/@modelcontextprotocol/server-slack/dist/index.js"], {"SLACK_BOT_TOKEN":"x","SLACK_TEAM_ID":"x"}),
 "postgres": (["node","node_modules/@modelcontextprotocol/server-postgres/dist/index.js","postgresql://localhost:1/x"], {}),
 "brave-search": (["node","node_modules/@modelcontextprotocol/server-brave-search/dist/index.js"], {"BRAVE_API_KEY":"x"}),
 "sequential-thinking": (["node","node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"], {}),
 "gitlab": (["node","node_modules/@modelcontextprotocol/server-gitlab/dist/index.js"], {"GITLAB_PERSONAL_ACCESS_TOKEN":"x"}),
 "google-maps": (["node","node_modules/@modelcontextprotocol/server-google-maps/dist/index.js"], {"GOOGLE_MAPS_API_KEY":"x"}),
 "redis": (["node","node_modules/@modelcontextprotocol/server-redis/dist/index.js","redis://localhost:1"], {}),
 "everything": (["node","node_modules/@modelcontextprotocol/server-everything/dist/index.js"], {}),
 "git": (["venv/bin/mcp-server-git"], {}),
 "fetch": (["venv/bin/mcp-server-fetch"], {}),
 "time": (["venv/bin/mcp-server-time"], {}),
 "sqlite": (["venv/bin/mcp-server-sqlite","--db-path","x.db"], {}),
 "playwright": (["node","node_modules/@playwright/mcp/cli.js"], {}),
 "notion": (["node","node_modules/@notionhq/notion-mcp-server/bin/cli.mjs"], {"NOTION_TOKEN":"x"}),
 "context7": (["node","node_modules/@upstash/context7-mcp/dist/index.js"], {}),
 "aws-kb-retrieval": (["node","node_modules/@modelcontextprotocol/server-aws-kb-retrieval/dist/index.js"], {"AWS_ACCESS_KEY_ID":"x","AWS_SECRET_ACCESS_KEY":"x","AWS_REGION":"us-east-1"}),
 "everart": (["node","node_modules/@modelcontextprotocol/server-everart/dist/index.js"], {"EVERART_API_KEY":"x"}),
  # The second round (more servers, for a labelled set over 40+ servers). Service URLs point at
  # a closed local port, so a server that connects at start fails fast and contacts no one.
 "kubernetes": (["node","node_modules/mcp-server-kubernetes/dist/index.js"], {"KUBECONFIG":"/nonexistent"}),
 "mongodb": (["node","node_modules/mongodb-mcp-server/dist/esm/index.js"], {"MDB_MCP_TELEMETRY":"disabled"}),
 "sentry": (["node","node_modules/@sentry/mcp-server/dist/index.js","--access-token","x"], {}),
 "stripe": (["node","node_modules/@stripe/mcp/dist/index.js","--tools=all","--api-key=sk_test_x"], {}),
 "supabase": (["node","node_modules/@supabase/mcp-server-supabase/dist/cli.js","--access-token","x"], {}),
 "firecrawl": (["node","node_modules/firecrawl-mcp/dist/index.js"], {"FIRECRAWL_API_KEY":"fc-x"}),
 "tavily": (["node","node_modules/tavily-mcp/build/index.js"], {"TAVILY_API_KEY":"x"}),
 "exa": (["node","node_modules/exa-mcp-server/dist/stdio.cjs"], {"EXA_API_KEY":"x"}),
 "hubspot": (["node","node_modules/@hubspot/mcp-server/dist/index.js"], {"PRIVATE_APP_ACCESS_TOKEN":"x"}),
 "elasticsearch": (["node","node_modules/@elastic/mcp-server-elasticsearch/dist/index.js"], {"ES_URL":"http://127.0.0.1:1","ES_API_KEY":"x"}),
 "neon": (["node","node_modules/@neondatabase/mcp-server-neon/dist/index.js","start","x"], {}),
 "circleci": (["node","node_modules/@circleci/mcp-server-circleci/dist/index.js"], {"CIRCLECI_TOKEN":"x"}),
 "airbnb": (["node","node_modules/@openbnb/mcp-server-airbnb/dist/index.js","--ignore-robots-txt"], {}),
 "figma": (["node","node_modules/figma-developer-mcp/dist/bin.js","--figma-api-key=x","--stdio"], {}),
 "heroku": (["node","node_modules/@heroku/mcp-server/bin/heroku-mcp-server.mjs"], {"HEROKU_API_KEY":"x"}),
 "desktop-commander": (["node","node_modules/@wonderwhy-er/desktop-commander/dist/index.js"], {}),
 "airtable": (["node","node_modules/airtable-mcp-server/dist/main.js"], {"AIRTABLE_API_KEY":"x"}),
 "gdrive": (["node","node_modules/@modelcontextprotocol/server-gdrive/dist/index.js"], {"GDRIVE_CREDENTIALS_PATH":"/nonexistent"}),
 "youtube-transcript": (["node","node_modules/@kimtaeyoon83/mcp-server-youtube-transcript/dist/index.js"], {}),
 "upstash": (["node","node_modules/@upstash/mcp-server/dist/index.js","run","x@example.com","x"], {}),
 "pinecone": (["node","node_modules/@pinecone-database/mcp/dist/index.js"], {"PINECONE_API_KEY":"x"}),
 "linear": (["node","node_modules/@tacticlaunch/mcp-linear/dist/index.js"], {"LINEAR_API_TOKEN":"x"}),
 "cloudflare": (["node","node_modules/@cloudflare/mcp-server-cloudflare/dist/index.js","run","x"], {}),
 "netlify": (["node","node_modules/@netlify/mcp/dist/netlify-mcp.js"], {}),
 "shopify-dev": (["node","node_modules/@shopify/dev-mcp/dist/index.js"], {}),
 "perplexity": (["node","node_modules/@perplexity-ai/mcp-server/dist/index.js"], {"PERPLEXITY_API_KEY":"x"}),
 "discord": (["node","node_modules/mcp-discord/build/index.js"], {"DISCORD_TOKEN":"x"}),
 "trello": (["node","node_modules/@delorenj/mcp-server-trello/build/index.js"], {"TRELLO_API_KEY":"x","TRELLO_TOKEN":"x","TRELLO_BOARD_ID":"x"}),
 "chart": (["node","node_modules/@antv/mcp-server-chart/build/index.js"], {}),
 "mermaid": (["node","node_modules/mcp-mermaid/build/index.js"], {}),
 "lara": (["node","node_modules/@translated/lara-mcp/dist/index.js"], {"LARA_ACCESS_KEY_ID":"x","LARA_ACCESS_KEY_SECRET":"x"}),
 "atlassian": (["venv/bin/mcp-atlassian"], {"JIRA_URL":"http://127.0.0.1:1","JIRA_USERNAME":"x","JIRA_API_TOKEN":"x","CONFLUENCE_URL":"http://127.0.0.1:1/wiki","CONFLUENCE_USERNAME":"x","CONFLUENCE_API_TOKEN":"x"}),
 "qdrant": (["venv/bin/mcp-server-qdrant"], {"QDRANT_URL":"http://127.0.0.1:1","COLLECTION_NAME":"x"}),
 "obsidian": (["venv/bin/mcp-obsidian"], {"OBSIDIAN_API_KEY":"x","OBSIDIAN_HOST":"127.0.0.1"}),
 "wikipedia": (["venv/bin/wikipedia-mcp"], {}),
 "arxiv": (["venv/bin/arxiv-mcp-server","--storage-path","arxiv-papers"], {}),
 "clickhouse": (["venv/bin/mcp-clickhouse"], {"CLICKHOUSE_HOST":"127.0.0.1","CLICKHOUSE_PORT":"1","CLICKHOUSE_USER":"x","CLICKHOUSE_PASSWORD":"x"}),
 "chroma": (["venv/bin/chroma-mcp","--client-type","ephemeral"], {}),
 "sentry-py": (["venv/bin/mcp-server-sentry","--auth-token","x"], {}),
 "calculator": (["venv/bin/mcp-server-calculator"], {}),
 "todoist": (["venv/bin/todoist-mcp"], {"TODOIST_API_KEY":"x"}),
 "pandoc": (["venv/bin/mcp-pandoc"], {}),
}
def rpc(p, msg):
    p.stdin.write((json.dumps(msg)+"\n").encode()); p.stdin.flush()
def read(p, want_id, deadline):
    buf=b""
    while time.time()<deadline:
        r,_,_=select.select([p.stdout],[],[],0.5)
        if not r: continue
        line=p.stdout.readline()
        if not line: return None
        try: m=json.loads(line)
        except Exception: continue
        if m.get("id")==want_id: return m
    return None
for name,(cmd,env) in servers.items():
    if len(sys.argv)>1 and name not in sys.argv[1:]: continue
    e=dict(os.environ); e.update(env)
    try:
        p=subprocess.Popen(cmd,stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,env=e,cwd=os.getcwd())
    except Exception as ex:
        print("FAIL",name,ex); continue
    rpc(p,{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"capture","version":"1"}}})
    init=read(p,1,time.time()+40)
    if not init: print("FAIL init",name); p.kill(); continue
    rpc(p,{"jsonrpc":"2.0","method":"notifications/initialized"})
    rpc(p,{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}})
    tl=read(p,2,time.time()+40)
    p.kill()
    if not tl or "result" not in tl: print("FAIL list",name,tl); continue
    info=init["result"].get("serverInfo",{})
    instructions=init["result"].get("instructions")
    json.dump({"server":name,"serverInfo":info,"instructions":instructions,"tools":tl["result"]["tools"]},open(f"out/{name}.json","w"),indent=1)
    print("ok",name,info,len(tl["result"]["tools"]))
