import { defineConfig } from 'drizzle-kit';

// Used only by `npm run db:generate` (drizzle-kit generate): it diffs db/schema.ts against the
// migration snapshots and writes the next SQL file. Applying migrations is db/migrate.ts.
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema.ts',
  out: './db/migrations',
});
