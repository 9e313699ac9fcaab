package site.ycsb.db.synod;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.resps.ScanResult;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * YCSB binding for synod's Redis front end (and any Redis), with the record layout of YCSB's
 * official redis binding: one hash per record (HMSET key field value ...), read with HGETALL
 * (all fields) or HMGET (some), update with HMSET, delete with DEL; and, for scans, a sorted
 * set "_indices" holding every key scored by its Java hashCode (ZADD on insert, ZREM on
 * delete, ZRANGEBYSCORE ... LIMIT 0 n to scan). It runs unchanged against a real
 * redis-server, which is how the two are compared (scripts/ycsb.sh).
 *
 * <p>Properties: redis.host (127.0.0.1), redis.port (7401), redis.password (none),
 * redis.timeout (ms, 30000), redis.index (true: keep "_indices" as the official binding does;
 * false: no index, one command per insert, and scans walk SCAN, whose cursor runs in key
 * order on synod). One connection per YCSB thread.
 */
public class SynodRedisClient extends DB {
  /** The sorted set of all keys, scored by hashCode, that scans walk (official layout). */
  static final String INDEX = "_indices";

  private Jedis jedis;
  private boolean index;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("redis.port", "7401"));
    int timeout = Integer.parseInt(p.getProperty("redis.timeout", "30000"));
    index = Boolean.parseBoolean(p.getProperty("redis.index", "true"));
    try {
      jedis = new Jedis(host, port, timeout);
      String password = p.getProperty("redis.password");
      if (password != null) {
        jedis.auth(password);
      }
      jedis.ping();
    } catch (RuntimeException e) {
      throw new DBException("cannot connect to " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    if (jedis != null) {
      jedis.close();
    }
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        Map<String, String> all = jedis.hgetAll(key);
        if (all.isEmpty()) {
          return Status.NOT_FOUND;
        }
        StringByteIterator.putAllAsByteIterators(result, all);
      } else {
        String[] names = fields.toArray(new String[0]);
        List<String> values = jedis.hmget(key, names);
        Iterator<String> it = values.iterator();
        for (String f : names) {
          String v = it.next();
          if (v != null) {
            result.put(f, new StringByteIterator(v));
          }
        }
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    Status s = hmset(key, values);
    if (!s.isOk() || !index) {
      return s;
    }
    try {
      jedis.zadd(INDEX, hash(key), key);
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  /** The score of a key in the index, as the official binding computes it. */
  private static double hash(String key) {
    return key.hashCode();
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return hmset(key, values);
  }

  private Status hmset(String key, Map<String, ByteIterator> values) {
    try {
      return "OK".equals(jedis.hmset(key, StringByteIterator.getStringMap(values))) ? Status.OK : Status.ERROR;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      long deleted = jedis.del(key);
      if (index) {
        jedis.zrem(INDEX, key);
      }
      return deleted == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    try {
      List<String> keys = index
          ? jedis.zrangeByScore(INDEX, hash(startkey), Double.POSITIVE_INFINITY, 0, recordcount)
          : scanKeys(startkey, recordcount);
      for (String k : keys) {
        HashMap<String, ByteIterator> values = new HashMap<>();
        Status s = read(table, k, fields, values);
        if (!s.isOk()) {
          return s;
        }
        result.add(values);
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  /** Without the index: the first keys at or after startkey, in SCAN order (key order on synod). */
  private List<String> scanKeys(String startkey, int recordcount) {
    List<String> keys = new ArrayList<>();
    String cursor = ScanParams.SCAN_POINTER_START;
    ScanParams params = new ScanParams().count(1000);
    do {
      ScanResult<String> page = jedis.scan(cursor, params);
      for (String k : page.getResult()) {
        if (k.compareTo(startkey) >= 0 && keys.size() < recordcount) {
          keys.add(k);
        }
      }
      cursor = page.getCursor();
    } while (!ScanParams.SCAN_POINTER_START.equals(cursor) && keys.size() < recordcount);
    return keys;
  }
}
