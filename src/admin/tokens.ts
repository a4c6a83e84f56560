/**
 * Dashboard tokens: HS256 JWTs (jose), algorithm pinned on verification so `alg: none` and
 * algorithm confusion are refused. Claims: `sub` the account, `ws` its workspace, `tv` the
 * account's token version.
 */

/** jose, loaded at the first token: a daemon used only through API keys (the proxy) never holds it (~1 MB of heap). */
const loadJose = () => import('jose');

export interface TokenClaims {
  accountId: string;
  workspaceId: string;
  tokenVersion: number;
}

export class TokenIssuer {
  private readonly key: Uint8Array;

  constructor(
    secret: string,
    readonly ttlSeconds: number,
  ) {
    this.key = new TextEncoder().encode(secret);
  }

  async sign(claims: TokenClaims): Promise<string> {
    const { SignJWT } = await loadJose();
    return new SignJWT({ ws: claims.workspaceId, tv: claims.tokenVersion })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(claims.accountId)
      .setIssuedAt()
      .setExpirationTime(`${this.ttlSeconds}s`)
      .sign(this.key);
  }

  /** The claims of a valid, unexpired token; null for anything else. */
  async verify(token: string): Promise<TokenClaims | null> {
    const { jwtVerify } = await loadJose();
    try {
      // A token without `exp` would never expire, and one without `iat` escapes any later rule on age.
      const { payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'], requiredClaims: ['exp', 'iat'] });
      if (typeof payload.sub !== 'string' || typeof payload.ws !== 'string' || typeof payload.tv !== 'number')
        return null;
      return { accountId: payload.sub, workspaceId: payload.ws, tokenVersion: payload.tv };
    } catch {
      return null;
    }
  }
}
