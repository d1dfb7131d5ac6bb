"""The statements that set up a new SQLite store, generated: do not edit.

Written by ``python -m convmem_graph.store._kept_script`` from the migrations' own scratch run
(see :mod:`~convmem_graph.store._fresh_sqlite`); used only while :data:`STAMP` is the schema stamp.
"""

from __future__ import annotations

#: The schema stamp this script was recorded under.
STAMP = 802030163

#: (statement, parameters) in order; the migration records' ``applied_at`` is set at each open.
SCRIPT: tuple[tuple[str, tuple[object, ...]], ...] = (
    (
        (
            "\n"
            "CREATE TABLE cm_schema_migrations (\n"
            "\tversion INTEGER NOT NULL, \n"
            "\tname VARCHAR(64) NOT NULL, \n"
            "\tapplied_at INTEGER NOT NULL, \n"
            "\tPRIMARY KEY (version)\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_memories (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tdescription TEXT NOT NULL, \n"
            "\tcreated_at INTEGER NOT NULL, \n"
            "\tupdated_at INTEGER NOT NULL, \n"
            "\textracted_seq INTEGER NOT NULL, \n"
            "\tsummarized_seq INTEGER NOT NULL, \n"
            "\tfacts_dirty INTEGER NOT NULL, \n"
            "\tfacts_zh INTEGER NOT NULL, \n"
            "\tfacts_other INTEGER NOT NULL, \n"
            "\texpired_through INTEGER DEFAULT 0 NOT NULL, \n"
            "\texpired_zh INTEGER DEFAULT 0 NOT NULL, \n"
            "\texpired_other INTEGER DEFAULT 0 NOT NULL, \n"
            "\tCONSTRAINT pk_cm_memories PRIMARY KEY (memory_id)\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_messages (\n"
            "\tseq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, \n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tid VARCHAR NOT NULL, \n"
            "\trole VARCHAR(16) NOT NULL, \n"
            "\tcontent TEXT NOT NULL, \n"
            "\tchannel VARCHAR(16) NOT NULL, \n"
            "\tsource VARCHAR(32) NOT NULL, \n"
            "\ttimestamp_ms INTEGER NOT NULL, \n"
            "\tturn_id INTEGER, \n"
            "\tround_id VARCHAR, \n"
            "\tspeaker_id VARCHAR, \n"
            "\tpartial BOOLEAN NOT NULL, \n"
            "\tinterrupted BOOLEAN NOT NULL, \n"
            "\toriginal TEXT, \n"
            "\tmetadata JSON, \n"
            "\tcontent_hash INTEGER, \n"
            "\tCONSTRAINT uq_cm_messages_memory_id_id UNIQUE (memory_id, id), \n"
            "\tCONSTRAINT fk_cm_messages_memory_id FOREIGN KEY(memory_id) REFERENCES c"
            "m_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_messages_memory_id_seq ON cm_messages (memory_id, seq)"),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_messages_memory_id_content_hash ON cm_messages (memory_id, content_hash)"),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_messages_memory_id_timestamp_ms ON cm_messages (memory_id, timestamp_ms)"),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_fragments (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tid VARCHAR NOT NULL, \n"
            "\tcontent TEXT NOT NULL, \n"
            "\tcategory VARCHAR(32) NOT NULL, \n"
            '\t"key" VARCHAR NOT NULL, \n'
            "\tstatus VARCHAR(16) NOT NULL, \n"
            "\ttransient BOOLEAN NOT NULL, \n"
            "\texpires_at INTEGER, \n"
            "\tsource_message_ids JSON, \n"
            "\torigin VARCHAR(16) NOT NULL, \n"
            "\tsuperseded_by VARCHAR, \n"
            "\tconfidence FLOAT NOT NULL, \n"
            "\tcreated_at INTEGER NOT NULL, \n"
            "\tupdated_at INTEGER NOT NULL, \n"
            "\tobserved_at INTEGER NOT NULL, \n"
            "\tpart_of VARCHAR, \n"
            "\tpart INTEGER, \n"
            "\tckey VARCHAR, \n"
            "\tnorm_hash INTEGER, \n"
            "\tcjk BOOLEAN, \n"
            "\tCONSTRAINT pk_cm_fragments PRIMARY KEY (memory_id, id), \n"
            "\tCONSTRAINT fk_cm_fragments_memory_id FOREIGN KEY(memory_id) REFERENCES "
            "cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_rank ON cm_fragments (memory_id, status, tr"
            "ansient DESC, confidence, observed_at, updated_at, id DESC)"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_newest ON cm_fragments (memory_id, status, "
            "transient, observed_at, cjk, expires_at)"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_lang ON cm_fragments (memory_id, status, tr"
            "ansient, cjk, observed_at, updated_at, created_at, id)"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_family ON cm_fragments (memory_id, status, "
            "transient, substr(ckey, 1, instr(ckey, ':')), observed_at, updated_at, c"
            "reated_at, id)"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_fragments_recent ON cm_fragments (memory_id, status, updated_at)"),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_recent_plan ON cm_fragments (memory_id, sta"
            "tus, updated_at, created_at, id) WHERE substr(ckey, 1, 5) = 'plan:'"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_memory_id_status_norm_hash ON cm_fragments "
            "(memory_id, status, norm_hash)"
        ),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_expiring ON cm_fragments (memory_id, transi"
            "ent, expires_at) WHERE expires_at IS NOT NULL"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_fragments_underived ON cm_fragments (memory_id) WHERE ckey IS NULL"),
        (),
    ),
    (
        (
            "CREATE INDEX ix_cm_fragments_recent_pet ON cm_fragments (memory_id, stat"
            "us, updated_at, created_at, id) WHERE substr(ckey, 1, 4) = 'pet:'"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_fragments_memory_id_status_ckey ON cm_fragments (memory_id, status, ckey)"),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_variable_specs (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tname VARCHAR(64) NOT NULL, \n"
            "\tposition INTEGER NOT NULL, \n"
            "\tdescription TEXT NOT NULL, \n"
            "\tinfer BOOLEAN NOT NULL, \n"
            "\ttype VARCHAR(16) NOT NULL, \n"
            "\tallowed_values JSON, \n"
            "\tCONSTRAINT pk_cm_variable_specs PRIMARY KEY (memory_id, name), \n"
            "\tCONSTRAINT fk_cm_variable_specs_memory_id FOREIGN KEY(memory_id) REFERE"
            "NCES cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            " WITHOUT ROWID\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_variables (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tname VARCHAR(64) NOT NULL, \n"
            "\torigin VARCHAR(16) NOT NULL, \n"
            "\tvalue JSON NOT NULL, \n"
            "\tfragment_ids JSON, \n"
            "\tupdated_at INTEGER NOT NULL, \n"
            "\tCONSTRAINT pk_cm_variables PRIMARY KEY (memory_id, name, origin), \n"
            "\tCONSTRAINT fk_cm_variables_memory_id FOREIGN KEY(memory_id) REFERENCES "
            "cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_summaries (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\ttext TEXT NOT NULL, \n"
            "\ttokens INTEGER NOT NULL, \n"
            "\tcovers_until_ms INTEGER NOT NULL, \n"
            "\tversion INTEGER NOT NULL, \n"
            "\tupdated_at INTEGER NOT NULL, \n"
            "\torigin VARCHAR(16) NOT NULL, \n"
            "\tCONSTRAINT pk_cm_summaries PRIMARY KEY (memory_id), \n"
            "\tCONSTRAINT fk_cm_summaries_memory_id FOREIGN KEY(memory_id) REFERENCES "
            "cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_snapshots (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tdata TEXT NOT NULL, \n"
            "\tupdated_at INTEGER NOT NULL, \n"
            "\tCONSTRAINT pk_cm_snapshots PRIMARY KEY (memory_id), \n"
            "\tCONSTRAINT fk_cm_snapshots_memory_id FOREIGN KEY(memory_id) REFERENCES "
            "cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_audit (\n"
            "\tid INTEGER NOT NULL, \n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\tat INTEGER NOT NULL, \n"
            "\tkind VARCHAR(16) NOT NULL, \n"
            "\tobject_id VARCHAR NOT NULL, \n"
            "\taction VARCHAR(16) NOT NULL, \n"
            '\t"before" JSON, \n'
            '\t"after" JSON, \n'
            "\tcause TEXT NOT NULL, \n"
            "\tCONSTRAINT pk_cm_audit PRIMARY KEY (id), \n"
            "\tCONSTRAINT fk_cm_audit_memory_id FOREIGN KEY(memory_id) REFERENCES cm_m"
            "emories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            "\n"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_audit_memory_id_id ON cm_audit (memory_id, id)"),
        (),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_replay_progress (\n"
            "\tfile_key VARCHAR(64) NOT NULL, \n"
            "\tpath VARCHAR(1024) NOT NULL, \n"
            "\tmessages INTEGER NOT NULL, \n"
            "\tfinished_at INTEGER NOT NULL, \n"
            "\tmemory_id VARCHAR, \n"
            "\tPRIMARY KEY (file_key)\n"
            ")\n"
            " WITHOUT ROWID\n"
            "\n"
        ),
        (),
    ),
    (
        ("CREATE INDEX ix_cm_replay_progress_memory_id ON cm_replay_progress (memory_id)"),
        (),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (1, "initial schema", 0),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_ins"),
        (),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_del"),
        (),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_upd"),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_ins AFTER INSERT ON cm_fr"
            "agments WHEN NEW.status = 'active' AND NEW.transient = 0 BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh + (COALESCE(NEW.cjk, 0) = 1), facts_ot"
            "her = facts_other + (COALESCE(NEW.cjk, 0) = 0), expired_zh = expired_zh "
            "+ (COALESCE(NEW.cjk, 0) = 1 AND (NEW.expires_at IS NOT NULL AND NEW.expi"
            "res_at <= expired_through)), expired_other = expired_other + (COALESCE(N"
            "EW.cjk, 0) = 0 AND (NEW.expires_at IS NOT NULL AND NEW.expires_at <= exp"
            "ired_through)) WHERE memory_id = NEW.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_del AFTER DELETE ON cm_fr"
            "agments WHEN OLD.status = 'active' AND OLD.transient = 0 BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh - (COALESCE(OLD.cjk, 0) = 1), facts_ot"
            "her = facts_other - (COALESCE(OLD.cjk, 0) = 0), expired_zh = expired_zh "
            "- (COALESCE(OLD.cjk, 0) = 1 AND (OLD.expires_at IS NOT NULL AND OLD.expi"
            "res_at <= expired_through)), expired_other = expired_other - (COALESCE(O"
            "LD.cjk, 0) = 0 AND (OLD.expires_at IS NOT NULL AND OLD.expires_at <= exp"
            "ired_through)) WHERE memory_id = OLD.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_upd AFTER UPDATE OF statu"
            "s, transient, cjk, memory_id, expires_at ON cm_fragments BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh - (COALESCE(OLD.cjk, 0) = 1), facts_ot"
            "her = facts_other - (COALESCE(OLD.cjk, 0) = 0), expired_zh = expired_zh "
            "- (COALESCE(OLD.cjk, 0) = 1 AND (OLD.expires_at IS NOT NULL AND OLD.expi"
            "res_at <= expired_through)), expired_other = expired_other - (COALESCE(O"
            "LD.cjk, 0) = 0 AND (OLD.expires_at IS NOT NULL AND OLD.expires_at <= exp"
            "ired_through)) WHERE memory_id = OLD.memory_id AND OLD.status = 'active'"
            " AND OLD.transient = 0; UPDATE cm_memories SET facts_zh = facts_zh + (CO"
            "ALESCE(NEW.cjk, 0) = 1), facts_other = facts_other + (COALESCE(NEW.cjk, "
            "0) = 0), expired_zh = expired_zh + (COALESCE(NEW.cjk, 0) = 1 AND (NEW.ex"
            "pires_at IS NOT NULL AND NEW.expires_at <= expired_through)), expired_ot"
            "her = expired_other + (COALESCE(NEW.cjk, 0) = 0 AND (NEW.expires_at IS N"
            "OT NULL AND NEW.expires_at <= expired_through)) WHERE memory_id = NEW.me"
            "mory_id AND NEW.status = 'active' AND NEW.transient = 0; END"
        ),
        (),
    ),
    (
        (
            "UPDATE cm_memories SET facts_zh=(SELECT count(*) AS count_1 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 1), facts_other=(SELECT count(*) AS count_2 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 0), expired_zh=(SELECT count(*) AS count_3 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 1 AND cm_fragments.expires_at IS NOT NULL AND cm_fragments.expires_a"
            "t <= cm_memories.expired_through), expired_other=(SELECT count(*) AS cou"
            "nt_4 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 0 AND cm_fragments.expires_at IS NOT NULL AND cm_fragments.expires_a"
            "t <= cm_memories.expired_through)"
        ),
        ("active", "active", "active", "active"),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (2, "language counts", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (3, "turn vectors", 0),
    ),
    (
        (
            "\n"
            "CREATE TABLE cm_round_interruptions (\n"
            "\tmemory_id VARCHAR NOT NULL, \n"
            "\ttask_id VARCHAR NOT NULL, \n"
            "\tround_id VARCHAR NOT NULL, \n"
            "\tat INTEGER NOT NULL, \n"
            "\tCONSTRAINT pk_cm_round_interruptions PRIMARY KEY (memory_id, task_id, r"
            "ound_id), \n"
            "\tCONSTRAINT fk_cm_round_interruptions_memory_id FOREIGN KEY(memory_id) R"
            "EFERENCES cm_memories (memory_id) ON DELETE CASCADE\n"
            ")\n"
            " WITHOUT ROWID\n"
            "\n"
        ),
        (),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (4, "round interruptions", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (5, "bailian node metadata", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (6, "turn vector stamps", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (7, "pgvector turn vectors", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (8, "fact vectors", 0),
    ),
    (
        ("ALTER TABLE cm_memories ADD COLUMN facts_rev INTEGER NOT NULL DEFAULT 0"),
        (),
    ),
    (
        ("ALTER TABLE cm_memories ADD COLUMN facts_cut INTEGER NOT NULL DEFAULT 0"),
        (),
    ),
    (
        ("ALTER TABLE cm_fragments ADD COLUMN rev INTEGER NOT NULL DEFAULT 0"),
        (),
    ),
    (
        ("CREATE INDEX IF NOT EXISTS ix_cm_fragments_rev ON cm_fragments (memory_id, rev)"),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_ins AFTER INSERT ON cm_fra"
            "gments BEGIN UPDATE cm_memories SET facts_rev = facts_rev + 1 WHERE memo"
            "ry_id = NEW.memory_id; UPDATE cm_fragments SET rev = COALESCE((SELECT fa"
            "cts_rev FROM cm_memories WHERE memory_id = NEW.memory_id), 0) WHERE memo"
            "ry_id = NEW.memory_id AND id = NEW.id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_upd AFTER UPDATE ON cm_fra"
            "gments WHEN NEW.rev IS OLD.rev BEGIN UPDATE cm_memories SET facts_rev = "
            "facts_rev + 1, facts_cut = facts_rev + 1 WHERE memory_id = OLD.memory_id"
            " AND OLD.memory_id IS NOT NEW.memory_id; UPDATE cm_memories SET facts_re"
            "v = facts_rev + 1 WHERE memory_id = NEW.memory_id; UPDATE cm_fragments S"
            "ET rev = COALESCE((SELECT facts_rev FROM cm_memories WHERE memory_id = N"
            "EW.memory_id), 0) WHERE memory_id = NEW.memory_id AND id = NEW.id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_del AFTER DELETE ON cm_fra"
            "gments BEGIN UPDATE cm_memories SET facts_rev = facts_rev + 1, facts_cut"
            " = facts_rev + 1 WHERE memory_id = OLD.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_memories_rev_ins AFTER INSERT ON cm_memo"
            "ries BEGIN UPDATE cm_memories SET facts_cut = random() WHERE memory_id ="
            " NEW.memory_id; END"
        ),
        (),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (9, "fact revisions", 0),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_ins"),
        (),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_del"),
        (),
    ),
    (
        ("DROP TRIGGER IF EXISTS cm_fragments_lang_upd"),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_ins AFTER INSERT ON cm_fr"
            "agments WHEN NEW.status = 'active' AND NEW.transient = 0 BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh + (COALESCE(NEW.cjk, 0) = 1), facts_ot"
            "her = facts_other + (COALESCE(NEW.cjk, 0) = 0), expired_zh = expired_zh "
            "+ (COALESCE(NEW.cjk, 0) = 1 AND (NEW.expires_at IS NOT NULL AND NEW.expi"
            "res_at <= expired_through)), expired_other = expired_other + (COALESCE(N"
            "EW.cjk, 0) = 0 AND (NEW.expires_at IS NOT NULL AND NEW.expires_at <= exp"
            "ired_through)) WHERE memory_id = NEW.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_del AFTER DELETE ON cm_fr"
            "agments WHEN OLD.status = 'active' AND OLD.transient = 0 BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh - (COALESCE(OLD.cjk, 0) = 1), facts_ot"
            "her = facts_other - (COALESCE(OLD.cjk, 0) = 0), expired_zh = expired_zh "
            "- (COALESCE(OLD.cjk, 0) = 1 AND (OLD.expires_at IS NOT NULL AND OLD.expi"
            "res_at <= expired_through)), expired_other = expired_other - (COALESCE(O"
            "LD.cjk, 0) = 0 AND (OLD.expires_at IS NOT NULL AND OLD.expires_at <= exp"
            "ired_through)) WHERE memory_id = OLD.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_upd AFTER UPDATE OF statu"
            "s, transient, cjk, memory_id, expires_at ON cm_fragments BEGIN UPDATE cm"
            "_memories SET facts_zh = facts_zh - (COALESCE(OLD.cjk, 0) = 1), facts_ot"
            "her = facts_other - (COALESCE(OLD.cjk, 0) = 0), expired_zh = expired_zh "
            "- (COALESCE(OLD.cjk, 0) = 1 AND (OLD.expires_at IS NOT NULL AND OLD.expi"
            "res_at <= expired_through)), expired_other = expired_other - (COALESCE(O"
            "LD.cjk, 0) = 0 AND (OLD.expires_at IS NOT NULL AND OLD.expires_at <= exp"
            "ired_through)) WHERE memory_id = OLD.memory_id AND OLD.status = 'active'"
            " AND OLD.transient = 0; UPDATE cm_memories SET facts_zh = facts_zh + (CO"
            "ALESCE(NEW.cjk, 0) = 1), facts_other = facts_other + (COALESCE(NEW.cjk, "
            "0) = 0), expired_zh = expired_zh + (COALESCE(NEW.cjk, 0) = 1 AND (NEW.ex"
            "pires_at IS NOT NULL AND NEW.expires_at <= expired_through)), expired_ot"
            "her = expired_other + (COALESCE(NEW.cjk, 0) = 0 AND (NEW.expires_at IS N"
            "OT NULL AND NEW.expires_at <= expired_through)) WHERE memory_id = NEW.me"
            "mory_id AND NEW.status = 'active' AND NEW.transient = 0; END"
        ),
        (),
    ),
    (
        (
            "UPDATE cm_memories SET facts_zh=(SELECT count(*) AS count_1 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 1), facts_other=(SELECT count(*) AS count_2 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 0), expired_zh=(SELECT count(*) AS count_3 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 1 AND cm_fragments.expires_at IS NOT NULL AND cm_fragments.expires_a"
            "t <= cm_memories.expired_through), expired_other=(SELECT count(*) AS cou"
            "nt_4 \n"
            "FROM cm_fragments \n"
            "WHERE cm_fragments.memory_id = cm_memories.memory_id AND cm_fragments.st"
            "atus = ? AND cm_fragments.transient = 0 AND coalesce(cm_fragments.cjk, 0"
            ") = 0 AND cm_fragments.expires_at IS NOT NULL AND cm_fragments.expires_a"
            "t <= cm_memories.expired_through)"
        ),
        ("active", "active", "active", "active"),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (10, "expired language counts, key families", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (11, "turn vectors by model", 0),
    ),
    (
        ("CREATE TABLE IF NOT EXISTS cm_snapshot_clock (id INTEGER PRIMARY KEY, rev INTEGER NOT NULL)"),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_ins AFTER INSERT ON cm_sna"
            "pshots BEGIN UPDATE cm_snapshot_clock SET rev = rev + 1 WHERE id = 1; UP"
            "DATE cm_memories SET snap_rev = (SELECT rev FROM cm_snapshot_clock WHERE"
            " id = 1) WHERE memory_id = NEW.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_upd AFTER UPDATE ON cm_sna"
            "pshots BEGIN UPDATE cm_snapshot_clock SET rev = rev + 1 WHERE id = 1; UP"
            "DATE cm_memories SET snap_rev = (SELECT rev FROM cm_snapshot_clock WHERE"
            " id = 1) WHERE memory_id = OLD.memory_id; UPDATE cm_snapshot_clock SET r"
            "ev = rev + 1 WHERE id = 1; UPDATE cm_memories SET snap_rev = (SELECT rev"
            " FROM cm_snapshot_clock WHERE id = 1) WHERE memory_id = NEW.memory_id; E"
            "ND"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_del AFTER DELETE ON cm_sna"
            "pshots BEGIN UPDATE cm_snapshot_clock SET rev = rev + 1 WHERE id = 1; UP"
            "DATE cm_memories SET snap_rev = (SELECT rev FROM cm_snapshot_clock WHERE"
            " id = 1) WHERE memory_id = OLD.memory_id; END"
        ),
        (),
    ),
    (
        (
            "CREATE TRIGGER IF NOT EXISTS cm_memories_snap_ins AFTER INSERT ON cm_mem"
            "ories BEGIN UPDATE cm_snapshot_clock SET rev = rev + 1 WHERE id = 1; UPD"
            "ATE cm_memories SET snap_rev = (SELECT rev FROM cm_snapshot_clock WHERE "
            "id = 1) WHERE memory_id = NEW.memory_id; END"
        ),
        (),
    ),
    (
        ("INSERT OR IGNORE INTO cm_snapshot_clock (id, rev) VALUES (1, 1)"),
        (),
    ),
    (
        ("ALTER TABLE cm_memories ADD COLUMN snap_rev INTEGER"),
        (),
    ),
    (
        ("UPDATE cm_memories SET snap_rev = (SELECT rev FROM cm_snapshot_clock WHERE id = 1)"),
        (),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (12, "snapshot revisions", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (13, "fact indexes stored oldest first", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (14, "unread inbox index dropped", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (15, "small keyed tables without rowid", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (16, "fact revisions on postgresql", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (17, "snapshots compressed with lz4 on PostgreSQL", 0),
    ),
    (
        ("INSERT INTO cm_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
        (18, "fact triggers once per statement on PostgreSQL", 0),
    ),
    (
        (
            "CREATE VIRTUAL TABLE IF NOT EXISTS cm_episodes USING fts5(body, content="
            "'', detail=none, tokenize='porter unicode61 remove_diacritics 2')"
        ),
        (),
    ),
    (
        ("CREATE TABLE IF NOT EXISTS cm_episode_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID"),
        (),
    ),
    (
        ("INSERT INTO cm_episodes(cm_episodes) VALUES ('delete-all')"),
        (),
    ),
    (
        ("INSERT INTO cm_episode_meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"),
        ("text_version", "1"),
    ),
)
