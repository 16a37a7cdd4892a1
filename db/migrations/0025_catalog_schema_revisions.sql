CREATE TABLE "catalog_route_hold" (
	"provider" text NOT NULL,
	"model" text NOT NULL,
	"revision_id" uuid NOT NULL,
	"reason" text NOT NULL,
	"held_by" text NOT NULL,
	"held_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "catalog_route_hold_provider_model_pk" PRIMARY KEY("provider","model")
);
--> statement-breakpoint
CREATE TABLE "catalog_schema_revision" (
	"revision_id" uuid PRIMARY KEY NOT NULL,
	"provider" text NOT NULL,
	"model" text NOT NULL,
	"provider_version" text,
	"digest" text NOT NULL,
	"input_schema" jsonb NOT NULL,
	"source_url" text NOT NULL,
	"changes" jsonb NOT NULL,
	"breaking" boolean NOT NULL,
	"recorded_by" text NOT NULL,
	"recorded_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "catalog_route_hold" ADD CONSTRAINT "catalog_route_hold_revision_id_catalog_schema_revision_revision_id_fk" FOREIGN KEY ("revision_id") REFERENCES "public"."catalog_schema_revision"("revision_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idx_catalog_schema_revision_model" ON "catalog_schema_revision" USING btree ("provider","model","recorded_at");