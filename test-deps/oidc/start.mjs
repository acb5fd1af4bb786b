// A strict OpenID provider for the broker's OAuth tests: `node start.mjs CONFIG.json`.
//
// Listens on 127.0.0.1 with a port the kernel picks, then prints `LISTENING <issuer>` on stdout.
// Every request line (method and URL, which carries the authorization request's PKCE
// parameters) and every grant outcome is printed as one JSON line, so tests can assert on what
// the provider received. CONFIG: {"clients": [client metadata…], "access_token_ttl": seconds,
// "resource_scope": "scopes granted for any resource indicator"}.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const log = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: config.clients,
    cookies: { keys: ['hanzo-dev-test-cookie-key'] },
    // PKCE for every client, S256 only (oidc-provider supports no other method).
    pkce: { required: () => true },
    // Rotate on every use; a reused refresh token revokes the grant.
    rotateRefreshToken: () => true,
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    ttl: {
      AccessToken: config.access_token_ttl ?? 3600,
      DeviceCode: config.device_code_ttl ?? 600,
    },
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      registration: { enabled: true },
      revocation: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => oneOf,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: config.resource_scope ?? 'mcp:read mcp:write',
          accessTokenFormat: 'jwt',
          audience: undefined,
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    scopes: ['openid', 'offline_access', 'profile'],
  });
  for (const event of ['grant.success', 'grant.error', 'authorization.error', 'server_error',
    'device_authorization.error', 'registration_create.error', 'refresh_token.consumed']) {
    provider.on(event, (ctx, err) => {
      log({
        event,
        path: ctx?.path,
        error: err?.error ?? (event.endsWith('error') ? String(err?.message ?? err) : undefined),
        error_description: err?.error_description,
      });
    });
  }
  provider.use(async (ctx, next) => {
    log({ request: ctx.method, url: ctx.originalUrl });
    await next();
  });
  server.on('request', provider.callback());
  log({ listening: issuer });
  process.stdout.write(`LISTENING ${issuer}\n`);
});

process.on('SIGTERM', () => process.exit(0));
